package pgserver

// SetNetwork moves a stopped server into network namespace netNS,
// listening on TCP at listenAddress (a comma list), from its next Restart
// on, as Options.NetNS and Options.ListenAddress do for Start: for a
// server another package started (a Citus coordinator, say) that a test
// must then cut off from some of its clients. Clients on the namespace's
// links are trusted, as Start trusts them.
func (s *Server) SetNetwork(netNS, listenAddress string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.NetNS, s.opts.ListenAddress = netNS, listenAddress
	return s.trustLinks()
}
