"""`simulate validate`: measured serving runs replayed as their benchmarks ran, and the model's error."""
