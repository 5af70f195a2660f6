supernode_add_test(ems_store_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ems_store_test.cpp
                   LIBS supernode_services LABEL unit)
supernode_add_test(prefix_keys_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_keys_test.cpp
                   LIBS supernode_services LABEL unit)
supernode_add_test(ems_pool_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ems_pool_test.cpp
                   LIBS supernode_services LABEL integration)
add_dependencies(ems_pool_test supernode)
