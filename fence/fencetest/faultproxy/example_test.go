package faultproxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"

	"github.com/fencekit/fencekit/fence/fencetest/faultproxy"
)

// echoServer answers every line with the same line and reports each line it
// received on got.
func echoServer(ln net.Listener, got chan<- string) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			rd := bufio.NewReader(conn)
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					return
				}
				got <- line
				if _, err := io.WriteString(conn, line); err != nil {
					return
				}
			}
		}()
	}
}

// A reply lost after the server executed the request: the client sees a
// broken connection, the server has done the work.
func Example() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	got := make(chan string, 2)
	go echoServer(ln, got)

	p, err := faultproxy.Start(ln.Addr().String())
	if err != nil {
		panic(err)
	}
	defer p.Close()

	// Dial has the signature of go-redis's Options.Dialer and pgx's
	// ConnConfig.DialFunc: the client keeps the server's address.
	conn, err := p.Dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)

	fmt.Fprint(conn, "hello\n")
	reply, err := rd.ReadString('\n')
	fmt.Printf("reply %q, error %v\n", reply, err)

	dropped := p.DropNextReply()
	fmt.Fprint(conn, "lost\n")
	_, err = rd.ReadString('\n')
	<-dropped
	fmt.Println("client got an error:", err != nil)
	<-got // hello
	fmt.Printf("server received %q\n", <-got)
	st := p.Stats()
	fmt.Printf("replies dropped %d, connections cut %d\n", st.Dropped, st.Cut)
	// Output:
	// reply "hello\n", error <nil>
	// client got an error: true
	// server received "lost\n"
	// replies dropped 1, connections cut 1
}
