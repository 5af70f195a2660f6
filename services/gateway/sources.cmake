# The gateway's HTTP layer: the Beast server, the OpenAI wire format, stop strings, metrics.
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
)
