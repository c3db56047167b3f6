"""Views (issue 21): SOW topics whose records the processor derives from the change
events of the topics they read, in the transaction of the change that caused them."""
