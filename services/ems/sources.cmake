# EMS memory-pool server logic: the consistent-hash ring and the tiered block store.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/hash_ring.cpp ${CMAKE_CURRENT_LIST_DIR}/block_handover.cpp
  ${CMAKE_CURRENT_LIST_DIR}/block_store.cpp ${CMAKE_CURRENT_LIST_DIR}/dram_arena.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prefix_keys.cpp ${CMAKE_CURRENT_LIST_DIR}/block_checksum.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mp_server.cpp ${CMAKE_CURRENT_LIST_DIR}/mp_controller.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ems_client.cpp ${CMAKE_CURRENT_LIST_DIR}/context_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/context_cache_client.cpp ${CMAKE_CURRENT_LIST_DIR}/model_fetch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pool_session.cpp ${CMAKE_CURRENT_LIST_DIR}/ems_config.cpp
)
