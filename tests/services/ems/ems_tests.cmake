supernode_add_test(ems_store_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ems_store_test.cpp
                   LIBS supernode_services LABEL unit)
supernode_add_test(prefix_keys_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_keys_test.cpp
                   LIBS supernode_services LABEL unit)
supernode_add_test(ems_pool_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ems_pool_test.cpp
                   LIBS supernode_services LABEL integration)
add_dependencies(ems_pool_test supernode)
# The MP server, and the MP SDK against a controller and a server, hosted over the inproc plane.
supernode_add_test(mp_server_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/mp_server_test.cpp
                   LIBS supernode_services LABEL unit)
supernode_add_test(ems_client_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ems_client_test.cpp
                   LIBS supernode_services LABEL unit)
# Chaos-run storage faults in the block store and the object store (its own binary: the plan is
# read once per process).
supernode_add_test(storage_fault_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/storage_fault_test.cpp
                   LIBS supernode_services LABEL unit)
# Replicas and a replaced MP controller, over a controller and servers hosted over the inproc
# plane (tests/services/ems/inproc_pool.hpp).
supernode_add_test(ems_replicas_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ems_replicas_test.cpp
                   LIBS supernode_services LABEL unit)
supernode_add_test(mp_controller_restart_test
                   SOURCES ${CMAKE_CURRENT_LIST_DIR}/mp_controller_restart_test.cpp
                   LIBS supernode_services LABEL unit)
# MP servers joining and leaving a live pool: the blocks a ring change moves, the controller's two
# phases against scripted servers, and a pool 2 -> 3 -> 1 over the inproc plane.
supernode_add_test(ems_handover_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ems_handover_test.cpp
                   LIBS supernode_services LABEL unit)
# The context cache client's counters as load reports read them while lookups run.
supernode_add_test(context_cache_client_test
                   SOURCES ${CMAKE_CURRENT_LIST_DIR}/context_cache_client_test.cpp
                   LIBS supernode_services LABEL unit)
