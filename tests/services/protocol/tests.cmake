# Every serving and EMS message through the byte planes' frames.
supernode_add_test(serving_messages_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/serving_messages_test.cpp LIBS supernode_services LABEL unit)
supernode_add_test(ems_messages_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/ems_messages_test.cpp LIBS supernode_services LABEL unit)
