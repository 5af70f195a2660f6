# The benchmarks that drive real processes and servers, and the infrastructure they share
# (reports, stop-signal cleanup); the launcher, HTTP client and metrics reader they use are
# services' (services/cluster, services/loadgen).
target_sources(supernode PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/bench_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stop_signals.cpp
  # `supernode bench serve`, the client side of the serving benchmark (logic in services/loadgen).
  ${CMAKE_CURRENT_LIST_DIR}/serve_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/engine_baseline.cpp
  # `supernode bench cache`
  ${CMAKE_CURRENT_LIST_DIR}/cache_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cache_bench_cluster.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cache_bench_sweep.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cache_bench_plot.cpp
  # `supernode bench resume`: a resumed request's time to its next token, recomputed or loaded
  ${CMAKE_CURRENT_LIST_DIR}/resume_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mtp_bench.cpp
  # `supernode bench scale`: the planner against fixed counts on a rate schedule
  ${CMAKE_CURRENT_LIST_DIR}/scale_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scale_bench_run.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scale_bench_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scale_script.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scale_bench_plot.cpp
  # `supernode bench model-cache`
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_bench.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_loaders.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_cache_report.cpp
  # `supernode bench model --expert-schedule`: the MoE experts' two schedules against each other
  ${CMAKE_CURRENT_LIST_DIR}/expert_schedule_bench.cpp
  # `supernode bench model --attention-scores`: BF16 against FP32 attention scores
  ${CMAKE_CURRENT_LIST_DIR}/attention_scores_bench.cpp
  # `supernode bench model --attention-kernel`: prefill attention alone, every path, one process
  ${CMAKE_CURRENT_LIST_DIR}/attention_kernel_bench.cpp
  # `supernode bench model --weight-pages`: a weight stream in 4 KB pages against huge pages
  ${CMAKE_CURRENT_LIST_DIR}/weight_pages_bench.cpp
)
target_link_libraries(supernode PRIVATE supernode_services)
