"""The cluster's controller (KRaft's spirit): the metadata log, the cluster image built from it, and the
controller state machine (broker registration and fencing, topics, replica assignment, leaders, ISR,
elections). See docs/replication.md."""
