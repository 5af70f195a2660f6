# The scheduler's decisions, driven directly over inproc endpoints.
supernode_add_test(scheduler_service_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_service_test.cpp
                   LIBS supernode_services LABEL unit)
