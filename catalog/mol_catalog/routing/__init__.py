"""routing: the decisions routers report, the labels people give them, their export."""
