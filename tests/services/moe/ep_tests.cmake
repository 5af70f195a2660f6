supernode_add_test(expert_parallel_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/expert_parallel_test.cpp
                   LIBS supernode_services LABEL model FIXTURE tiny_model)
supernode_add_test(ep_formation_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ep_formation_test.cpp
                   LIBS supernode_services LABEL model FIXTURE tiny_model)
supernode_add_test(ep_rank_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ep_rank_test.cpp
                   LIBS supernode_services LABEL model FIXTURE tiny_model)
