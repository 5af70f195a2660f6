supernode_add_test(serving_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/serving_engine_test.cpp
                   LIBS supernode_services LABEL model FIXTURE tiny_model)
supernode_add_test(cluster_file_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cluster_file_test.cpp
                   LIBS supernode_services LABEL unit)
