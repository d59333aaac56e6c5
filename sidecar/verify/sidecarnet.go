package verify

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/queenside/queenside/sidecar/netns"
	"github.com/queenside/queenside/sidecar/pgserver"
)

// sidecarNet is the network a run with partition faults puts between the
// sidecars and PostgreSQL: the server (and its standby, or the Citus
// coordinator) in a network namespace of its own, reached by sidecar i
// over link i alone. Cutting link i cuts sidecar i off and no one else:
// the other sidecars have links of their own, and the verifier and the
// servers among themselves (a standby's streaming, the coordinator's
// connections to its workers) go over Unix sockets, which no link carries.
type sidecarNet struct {
	ns    *netns.Net
	links []*netns.Link
	// standbyAddrs are the standby's address on each link, beside the
	// primary's ServerAddr: both listen on PostgreSQL's one port.
	standbyAddrs []string
}

// newSidecarNet makes the namespace and a link per sidecar, with a second
// server address on each when there is a standby. The error says why
// namespaces cannot be made here, in one line.
func newSidecarNet(sidecars int, standby bool) (*sidecarNet, error) {
	ns, err := netns.New()
	if err != nil {
		return nil, err
	}
	n := &sidecarNet{ns: ns}
	for range sidecars {
		l, err := ns.Link()
		if err != nil {
			n.close() //nolint:errcheck // the link's error says more
			return nil, err
		}
		n.links = append(n.links, l)
		if !standby {
			continue
		}
		addr, err := l.AddServerAddr()
		if err != nil {
			n.close() //nolint:errcheck // the address's error says more
			return nil, err
		}
		n.standbyAddrs = append(n.standbyAddrs, addr)
	}
	return n, nil
}

// primaryOptions puts a server in the namespace, listening on every
// link's first server address; standbyOptions on the second ones.
func (n *sidecarNet) primaryOptions(o pgserver.Options) pgserver.Options {
	o.NetNS, o.ListenAddress = n.ns.Name(), n.primaryListen()
	return o
}

func (n *sidecarNet) standbyOptions(o pgserver.Options) pgserver.Options {
	o.NetNS, o.ListenAddress = n.ns.Name(), strings.Join(n.standbyAddrs, ",")
	return o
}

func (n *sidecarNet) primaryListen() string {
	addrs := make([]string, len(n.links))
	for i, l := range n.links {
		addrs[i] = l.ServerAddr
	}
	return strings.Join(addrs, ",")
}

// url is sidecar i's database URL: over TCP on its own link, to the
// primary and, when there is one, to the standby, whichever accepts
// writes (libpq's multi-host form, as a run with failovers uses over the
// Unix sockets). Both keep their addresses when they swap roles.
func (n *sidecarNet) url(i int, database string, port int) string {
	hosts := []string{n.links[i].ServerAddr}
	if len(n.standbyAddrs) > 0 {
		hosts = append(hosts, n.standbyAddrs[i])
	}
	return hostsURL(database, port, hosts)
}

// close removes the namespace and its links; the servers in it must have
// stopped.
func (n *sidecarNet) close() error {
	if n == nil || n.ns == nil {
		return nil
	}
	return n.ns.Close()
}

// hostsURL names every host (a Unix socket directory or a TCP address, all
// on one port), the one accepting writes to be used, as libpq's
// multi-host form does.
func hostsURL(database string, port int, hosts []string) string {
	ports := make([]string, len(hosts))
	for i := range hosts {
		ports[i] = strconv.Itoa(port)
	}
	q := url.Values{}
	q.Set("host", strings.Join(hosts, ","))
	q.Set("port", strings.Join(ports, ","))
	if len(hosts) > 1 {
		q.Set("target_session_attrs", "read-write")
	}
	q.Set("sslmode", "disable")
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + database, RawQuery: q.Encode()}).String()
}
