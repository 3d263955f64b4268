// Package servers starts throwaway local Redis and PostgreSQL servers for
// programs that kill and restart them: fencelab's chaos run with
// -kill-server-every. It needs no testing.TB, unlike internal/testkit,
// whose helpers report through a test; both find the same binaries.
//
// Every server listens on a free 127.0.0.1 port, keeps its files in a
// directory the caller owns, and is killed with SIGKILL should the program
// die without calling Close (Pdeathsig, on Linux).
package servers
