//go:build !unix

package proxy

import "net"

func canPeek(net.Conn) bool { return false }

func peerClosed(net.Conn) bool { return false }
