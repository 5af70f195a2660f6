# The gateway's HTTP layer: the Beast server, the OpenAI wire format, stop strings, metrics,
# API keys and their limits.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/http_server.cpp
  ${CMAKE_CURRENT_LIST_DIR}/http_connection.cpp
  ${CMAKE_CURRENT_LIST_DIR}/http_wire.cpp
  ${CMAKE_CURRENT_LIST_DIR}/openai_api.cpp
  ${CMAKE_CURRENT_LIST_DIR}/error_mapping.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stop_matcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cluster_metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/request_tracker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/latency_window.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner_runner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/api_keys.cpp
  ${CMAKE_CURRENT_LIST_DIR}/admin_scale.cpp
  ${CMAKE_CURRENT_LIST_DIR}/key_limiter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/health.cpp
)
# API keys are kept as BLAKE2b digests and compared in constant time: libsodium.
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
target_link_libraries(supernode_services PRIVATE PkgConfig::SODIUM)
