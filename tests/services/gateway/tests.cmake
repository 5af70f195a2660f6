# The gateway's HTTP layer (services/gateway): pure logic first, then the server over sockets.
supernode_add_test(openai_api_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/openai_api_test.cpp LIBS supernode_services LABEL unit)
supernode_add_test(stop_matcher_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/stop_matcher_test.cpp LIBS supernode_services LABEL unit)
supernode_add_test(api_keys_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/api_keys_test.cpp LIBS supernode_services LABEL unit)
supernode_add_test(key_limiter_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/key_limiter_test.cpp LIBS supernode_services LABEL unit)
supernode_add_test(metrics_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cpp LIBS supernode_services LABEL unit)
supernode_add_test(http_server_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_server_test.cpp LIBS supernode_services LABEL integration)
# The gateway and the scheduler over the inproc plane, a probe for the decode instance.
supernode_add_test(gateway_errors_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/gateway_errors_test.cpp LIBS supernode_services LABEL unit
  FIXTURE tiny_model)
target_link_libraries(gateway_errors_test PRIVATE nlohmann_json::nlohmann_json)
supernode_add_test(request_tracker_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/request_tracker_test.cpp LIBS supernode_services LABEL unit)
# /health's three answers from membership and the scheduler's statistics.
supernode_add_test(health_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/health_test.cpp LIBS supernode_services LABEL unit)
# The planner's rounds against a scripted supervisor, latencies and statistics.
supernode_add_test(planner_runner_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/planner_runner_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/latency_window_test.cpp
  LIBS supernode_services LABEL unit)
target_link_libraries(planner_runner_test PRIVATE nlohmann_json::nlohmann_json)
