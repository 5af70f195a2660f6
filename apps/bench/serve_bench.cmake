# `supernode bench serve`, the client side of the serving benchmark (logic in services/loadgen).
target_sources(supernode PRIVATE ${CMAKE_CURRENT_LIST_DIR}/serve_bench.cpp)
target_link_libraries(supernode PRIVATE supernode_services)
target_sources(supernode PRIVATE ${CMAKE_CURRENT_LIST_DIR}/engine_baseline.cpp)
target_sources(supernode PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cache_bench.cpp)
target_sources(supernode PRIVATE ${CMAKE_CURRENT_LIST_DIR}/model_cache_bench.cpp)
target_sources(supernode PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bench_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stop_signals.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cache_bench_cluster.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cache_bench_sweep.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cache_bench_plot.cpp
)
target_sources(supernode PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_loaders.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_report.cpp
)
