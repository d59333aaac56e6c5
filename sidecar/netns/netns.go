// Package netns makes real network partitions for tests and for
// `queenside verify`: a server runs in a network namespace of its own,
// reached from this one over links (veth pairs), one per client that is to
// be cut off alone. Cutting a link takes its end in the server's namespace
// down: what this side sends over it is dropped without a word (the
// neighbours are written in for good, so no failed address resolution
// reports an error either), just as a partition in a cluster drops
// packets. Healing brings it back up; connections that survived resume.
//
// It needs root on Linux and iproute2's ip; Available says why not where
// that is missing, so a test can skip in one line.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Available returns nil where namespaces can be made, else why not.
func Available() error {
	if runtime.GOOS != "linux" {
		return errors.New("network namespaces need Linux")
	}
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("network namespaces need ip (iproute2)")
	}
	return nil
}

// prefix names every namespace this package makes, then the maker's
// process id, so that one left by a process that died can be removed.
const prefix = "queenside-"

// Net is a namespace for a server, with its links.
type Net struct {
	name string
	tag  string // a few random hex digits naming the links' interfaces
	net  int    // the second byte of the links' addresses (10.net.link.0/24)

	mu    sync.Mutex
	links []*Link
}

// New makes a namespace with its loopback up. Namespaces left by
// processes that are gone are removed first.
func New() (*Net, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	removeStale()
	tag := fmt.Sprintf("%06x", rand.IntN(1<<24))
	n := &Net{name: fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), tag), tag: tag, net: 64 + rand.IntN(128)}
	if err := ip("netns", "add", n.name); err != nil {
		return nil, err
	}
	if err := ip("-n", n.name, "link", "set", "lo", "up"); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Name is the namespace's name, as `ip netns exec` takes it.
func (n *Net) Name() string { return n.name }

// Link is a veth pair from this namespace into the server's, on a /24 of
// its own: the server is at ServerAddr there, this side at HostAddr.
type Link struct {
	net                  *Net
	hostIf, serverIf     string
	HostAddr, ServerAddr string

	subnet    string // the first three bytes of the link's addresses
	serverMAC string // the server end's hardware address, written in on this side
	extra     int    // server addresses added beyond ServerAddr
}

// Link adds a link. Addresses are 10.x.y.1 (this side) and 10.x.y.2 (the
// server's), x drawn at random for the namespace and y the link's number,
// retried while another interface of this machine holds that network.
func (n *Net) Link() (*Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := len(n.links)
	l := &Link{net: n, hostIf: fmt.Sprintf("qs%sh%d", n.tag, i), serverIf: fmt.Sprintf("qs%ss%d", n.tag, i)}
	subnet := ""
	for range 32 {
		subnet = fmt.Sprintf("10.%d.%d", n.net, i+1)
		if !inUse(subnet + ".0/24") {
			break
		}
		n.net = 64 + rand.IntN(128)
	}
	l.subnet, l.HostAddr, l.ServerAddr = subnet, subnet+".1", subnet+".2"
	steps := [][]string{
		{"link", "add", l.hostIf, "type", "veth", "peer", "name", l.serverIf, "netns", n.name},
		{"addr", "add", l.HostAddr + "/24", "dev", l.hostIf},
		{"link", "set", l.hostIf, "up"},
		{"-n", n.name, "addr", "add", l.ServerAddr + "/24", "dev", l.serverIf},
		{"-n", n.name, "link", "set", l.serverIf, "up"},
	}
	for _, args := range steps {
		if err := ip(args...); err != nil {
			ip("link", "del", l.hostIf) //nolint:errcheck // best effort: the pair goes with either end
			return nil, err
		}
	}
	// Neighbours written in for good: while the link is cut, sending finds
	// no failed resolution to report, only silence.
	hostMAC, err := mac("", l.hostIf)
	if err == nil {
		if l.serverMAC, err = mac(n.name, l.serverIf); err == nil {
			err = errors.Join(
				ip("neigh", "replace", l.ServerAddr, "lladdr", l.serverMAC, "nud", "permanent", "dev", l.hostIf),
				ip("-n", n.name, "neigh", "replace", l.HostAddr, "lladdr", hostMAC, "nud", "permanent", "dev", l.serverIf))
		}
	}
	if err != nil {
		ip("link", "del", l.hostIf) //nolint:errcheck // best effort
		return nil, err
	}
	n.links = append(n.links, l)
	return l, nil
}

// AddServerAddr gives the server's end of the link one more address on
// the link's network (10.x.y.3, then .4...) and returns it: a second
// server in the namespace, on the same port as the first (a standby),
// listens there. Its neighbour is written in for good as ServerAddr's is,
// so a cut silences it too.
func (l *Link) AddServerAddr() (string, error) {
	l.net.mu.Lock()
	defer l.net.mu.Unlock()
	addr := fmt.Sprintf("%s.%d", l.subnet, 3+l.extra)
	if err := ip("-n", l.net.name, "addr", "add", addr+"/24", "dev", l.serverIf); err != nil {
		return "", err
	}
	if err := ip("neigh", "replace", addr, "lladdr", l.serverMAC, "nud", "permanent", "dev", l.hostIf); err != nil {
		ip("-n", l.net.name, "addr", "del", addr+"/24", "dev", l.serverIf) //nolint:errcheck // best effort: the address is not handed out
		return "", err
	}
	l.extra++
	return addr, nil
}

// Cut drops everything sent over the link, both ways, without an error.
func (l *Link) Cut() error { return ip("-n", l.net.name, "link", "set", l.serverIf, "down") }

// Heal carries traffic over the link again.
func (l *Link) Heal() error { return ip("-n", l.net.name, "link", "set", l.serverIf, "up") }

// Close removes the namespace and its links. Processes still running in
// it keep it alive until they exit: stop them first.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range n.links {
		ip("link", "del", l.hostIf) //nolint:errcheck // gone with the namespace anyway
	}
	n.links = nil
	return ip("netns", "del", n.name)
}

// removeStale removes the namespaces of processes that are gone.
func removeStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || processAlive(pid) {
			continue
		}
		ip("netns", "del", name) //nolint:errcheck // best effort
	}
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// inUse reports whether an address of this namespace lies in cidr.
func inUse(cidr string) bool {
	out, err := exec.Command("ip", "-o", "addr", "show", "to", cidr).Output()
	return err != nil || len(bytes.TrimSpace(out)) > 0
}

// mac is the hardware address of dev in namespace ns ("": this one).
func mac(ns, dev string) (string, error) {
	args := []string{"-o", "link", "show", dev}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		return "", fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "link/ether" {
			return f[i+1], nil
		}
	}
	return "", fmt.Errorf("no hardware address for %s in %q", dev, out)
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
