supernode_add_test(model_cache_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_cache_test.cpp
                   LIBS supernode_services LABEL unit)
