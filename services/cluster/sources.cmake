# Running a cluster's processes: the launcher, `supernode role` processes, generated configs, and
# the supervisor that restarts them (its policy, event log and control socket).
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/process_launcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/role_launch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cluster_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/restart_policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/event_log.cpp
  ${CMAKE_CURRENT_LIST_DIR}/control_socket.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scale_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/join_policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/supervisor.cpp
)
target_link_libraries(supernode_services PRIVATE nlohmann_json::nlohmann_json)
