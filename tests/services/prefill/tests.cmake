# A prefill instance hosted over the inproc plane; a probe plays the decode instance.
supernode_add_test(prefill_instance_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefill_instance_test.cpp LIBS supernode_services LABEL unit
  FIXTURE tiny_model)
