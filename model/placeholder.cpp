namespace supernode {}
