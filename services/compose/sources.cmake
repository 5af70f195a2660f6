# The docker-compose files `supernode compose` writes from a cluster config.
target_sources(supernode_services PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/compose_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compose_project.cpp
)
