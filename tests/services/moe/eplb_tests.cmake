supernode_add_test(eplb_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/eplb_test.cpp
                   LIBS supernode_services LABEL unit)
