supernode_add_test(moe_layout_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/moe_layout_test.cpp
                   LIBS supernode_services LABEL unit)
