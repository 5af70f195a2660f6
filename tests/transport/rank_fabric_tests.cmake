# The rank fabric (shm and zmq) with ranks as threads of one test process.
supernode_add_test(rank_fabric_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/rank_fabric_test.cpp LIBS supernode_transport LABEL integration)
