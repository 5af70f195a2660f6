# Running a cluster's processes (services/cluster): the launcher with /bin/sh as the child, and
# the generated configs.
supernode_add_test(cluster_launch_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/process_launcher_test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cluster_file_test.cpp
  LIBS supernode_services
  LABEL unit)
# The supervisor's restart rules on a made-up clock.
supernode_add_test(restart_policy_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/restart_policy_test.cpp
  LIBS supernode_services
  LABEL unit)
# The supervisor with /bin/sh children: events, restarts, give-up, its control socket.
supernode_add_test(supervisor_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/supervisor_test.cpp
  LIBS supernode_services
  LABEL integration)
target_link_libraries(supervisor_test PRIVATE nlohmann_json::nlohmann_json)
# What a scale request changes, and operation ids, without processes.
supernode_add_test(scale_plan_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/scale_plan_test.cpp
  LIBS supernode_services
  LABEL unit)
