# A decode instance hosted over the inproc plane; probes play its scheduler, prefill and gateway.
supernode_add_test(decode_instance_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/decode_instance_test.cpp LIBS supernode_services LABEL unit
  FIXTURE tiny_model)

# Resuming a request in a decode batch: continuation and KV bit-equal to the uninterrupted run.
supernode_add_test(decode_resume_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/decode_resume_test.cpp LIBS supernode_services LABEL unit
  FIXTURE tiny_model)

# The adaptive MTP depth: drafting where it pays, not where verification costs more.
supernode_add_test(mtp_depth_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/mtp_depth_test.cpp LIBS supernode_services LABEL unit)
