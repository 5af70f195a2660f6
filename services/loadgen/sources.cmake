# The serving load generator behind `supernode bench serve`.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/workload.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sse_parser.cpp
  ${CMAKE_CURRENT_LIST_DIR}/completion_stream.cpp
  ${CMAKE_CURRENT_LIST_DIR}/http_url.cpp
  ${CMAKE_CURRENT_LIST_DIR}/http_client.cpp
  ${CMAKE_CURRENT_LIST_DIR}/load_runner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/latency_plot.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prometheus_text.cpp
)
