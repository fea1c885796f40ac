//go:build !linux

package sampler

import "net"

// muxLoop is the shared upstream connection's event loop, which uses epoll: elsewhere
// there is none, and every client gets a connection of its own.
type muxLoop struct{}

func (p *Proxy) startLoop() (*muxLoop, error) { return nil, nil }
func (l *muxLoop) adopt(pc *proxyConn) bool   { return false }
func (l *muxLoop) alive() bool                { return false }
func (l *muxLoop) close()                     {}
func (l *muxLoop) drain()                     {}

// connSendQueue cannot tell the bytes c's peer has not acknowledged here: -1.
func connSendQueue(net.Conn) int { return -1 }
