# Expert parallelism: placement, static buffer sizing, FusedDispatch/FusedCombine over a rank fabric.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/expert_placement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dispatch_buffers.cpp
)
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ep_layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/expert_parallel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/expert_parallel_eplb.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ep_membership.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ep_rank.cpp
  ${CMAKE_CURRENT_LIST_DIR}/expert_shard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/microbatch_pipeline.cpp
  ${CMAKE_CURRENT_LIST_DIR}/local_group.cpp
)
