supernode_add_test(compose_file_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/compose_file_test.cpp
  LIBS supernode_services LABEL unit)
supernode_add_test(compose_drift_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/compose_drift_test.cpp
  LIBS supernode_services LABEL unit)
