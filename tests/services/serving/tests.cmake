supernode_add_test(serving_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/serving_engine_test.cpp
                   LIBS supernode_services LABEL model FIXTURE tiny_model)
supernode_add_test(cluster_file_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cluster_file_test.cpp
                   LIBS supernode_services LABEL unit)
supernode_add_test(serving_config_test
                   SOURCES ${CMAKE_CURRENT_LIST_DIR}/serving_config_test.cpp
                   LIBS supernode_services LABEL unit)
