#include <cstdio>
int main() { std::puts("supernode"); return 0; }
