// Command udpecho answers every UDP datagram on -addr with "echo:" and the
// datagram: the UDP server of podlab's host-port tests (busybox's nc has
// no UDP mode).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
)

func main() {
	addr := flag.String("addr", ":8082", "UDP address to listen on")
	flag.Parse()
	conn, err := net.ListenPacket("udp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buf := make([]byte, 64<<10)
	for {
		n, peer, err := conn.ReadFrom(buf)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		conn.WriteTo(append([]byte("echo:"), buf[:n]...), peer)
	}
}
