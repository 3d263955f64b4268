// Package failover holds tests of real failovers, partitions and clock
// steps on throwaway servers: Redis Sentinel promoting a replica, Redis
// Cluster promoting a replica of a killed master, a PostgreSQL standby
// promoted with pg_promote, clients cut from their server in a network
// namespace, and server clocks stepped with libfaketime. It has no code of
// its own; docs/reliability.md lists each test and what it shows.
package failover
