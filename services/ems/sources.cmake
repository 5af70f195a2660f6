# EMS memory-pool server logic: the consistent-hash ring and the tiered block store.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/hash_ring.cpp
  ${CMAKE_CURRENT_LIST_DIR}/block_store.cpp ${CMAKE_CURRENT_LIST_DIR}/dram_arena.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prefix_keys.cpp
)
