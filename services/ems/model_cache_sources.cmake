# EMS model caching: bandwidth-capped object storage, model folders cut into pool blocks, and the
# one-fetch-for-N model cache over pool_client.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/object_store.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_blocks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_cache.cpp
)
