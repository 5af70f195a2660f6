# A decode instance hosted over the inproc plane; probes play its scheduler, prefill and gateway.
supernode_add_test(decode_instance_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/decode_instance_test.cpp LIBS supernode_services LABEL unit
  FIXTURE tiny_model)
