# The serving load generator (services/loadgen): pure logic, then against a fake SSE server.
supernode_add_test(loadgen_unit_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/workload_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/report_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/sse_parser_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/completion_stream_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/http_url_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/latency_plot_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/prometheus_text_test.cpp
  LIBS supernode_services
  LABEL unit)
supernode_add_test(loadgen_integration_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/fake_openai_server.cpp
    ${CMAKE_CURRENT_LIST_DIR}/load_runner_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/http_request_test.cpp
  LIBS supernode_services
  LABEL integration)
