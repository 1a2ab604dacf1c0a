// Safety-suite worker for go-redsync (github.com/go-redsync/redsync/v4 with go-redis v9).
//
// It is configured the way a user's pod is: the cluster's `<name>-client` Secret and
// `<name>-endpoints` ConfigMap mounted as directories (REDLOCK_SECRET_DIR, REDLOCK_CONFIG_DIR),
// the servers reached by their published Service names. The harness drives it over the line
// protocol described in tests/safety/src/protocol.rs; every timestamp is CLOCK_MONOTONIC in
// nanoseconds, the clock the harness and the other workers read too. For each lock it got,
// it also reports every member's reply to the acquisition and the release (`reply` lines),
// noted by a wrapper around go-redsync's pools: go-redsync itself only says how many agreed.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

func monoNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		fatal("clock_gettime: %v", err)
	}
	return ts.Nano()
}

var out = bufio.NewWriter(os.Stdout)

func emit(format string, args ...any) {
	fmt.Fprintf(out, format+"\n", args...)
	out.Flush()
}

func fatal(format string, args ...any) {
	emit("error "+format, args...)
	os.Exit(1)
}

func readFile(dir, key string) string {
	b, err := os.ReadFile(filepath.Join(dir, key))
	if err != nil {
		fatal("read %s: %v", key, err)
	}
	return strings.TrimSpace(string(b))
}

// oneLine keeps a reason on the single protocol line it belongs to.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// A member's reply to one step of an operation, as go-redsync received it from go-redis.
type reply struct {
	t       int64
	step    string
	member  string
	outcome string
	detail  string
}

// replies collects what each member answered; go-redsync asks the members concurrently and
// waits for every answer before returning from LockContext and UnlockContext.
type replies struct {
	mu   sync.Mutex
	step string
	got  []reply
}

// start begins a step: the replies of the previous one are dropped.
func (r *replies) start(step string) {
	r.mu.Lock()
	r.step, r.got = step, nil
	r.mu.Unlock()
}

func (r *replies) add(member, outcome, detail string) {
	t := monoNs()
	r.mu.Lock()
	r.got = append(r.got, reply{t, r.step, member, outcome, detail})
	r.mu.Unlock()
}

// emit writes the step's replies as `reply` lines of operation seq.
func (r *replies) emit(seq string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.got {
		line := fmt.Sprintf("reply %s %d %s %s %s", seq, x.t, x.step, x.member, x.outcome)
		if x.detail != "" {
			line += " " + x.detail
		}
		emit("%s", line)
	}
}

// recordingPool hands go-redsync connections that note each member's reply to SET NX (the
// acquisition) and to the delete script (the release) before returning it unchanged.
type recordingPool struct {
	inner  redsyncredis.Pool
	member string
	rec    *replies
}

func (p recordingPool) Get(ctx context.Context) (redsyncredis.Conn, error) {
	c, err := p.inner.Get(ctx)
	if err != nil {
		p.rec.add(p.member, "error", oneLine(err))
		return nil, err
	}
	return recordingConn{c, p}, nil
}

type recordingConn struct {
	redsyncredis.Conn
	p recordingPool
}

func (c recordingConn) SetNX(name string, value string, expiry time.Duration) (bool, error) {
	ok, err := c.Conn.SetNX(name, value, expiry)
	switch {
	case err != nil:
		c.p.rec.add(c.p.member, "error", oneLine(err))
	case ok:
		c.p.rec.add(c.p.member, "ok", "")
	default:
		c.p.rec.add(c.p.member, "no", "key held")
	}
	return ok, err
}

func (c recordingConn) Eval(script *redsyncredis.Script, keysAndArgs ...any) (any, error) {
	v, err := c.Conn.Eval(script, keysAndArgs...)
	switch {
	case err != nil:
		c.p.rec.add(c.p.member, "error", oneLine(err))
	case v == int64(1):
		c.p.rec.add(c.p.member, "ok", "")
	case v == int64(-1):
		c.p.rec.add(c.p.member, "no", "key gone")
	case v == int64(0):
		c.p.rec.add(c.p.member, "no", "another value")
	default:
		c.p.rec.add(c.p.member, "no", fmt.Sprintf("reply %v", v))
	}
	return v, err
}

func main() {
	secretDir, configDir := os.Getenv("REDLOCK_SECRET_DIR"), os.Getenv("REDLOCK_CONFIG_DIR")
	urls := strings.Fields(readFile(secretDir, "urls"))
	servers := strings.Fields(readFile(configDir, "servers"))
	quorum, _ := strconv.Atoi(readFile(configDir, "quorum"))
	maxTTL, _ := strconv.Atoi(readFile(configDir, "maxLockTTLMillis"))
	// redsync computes its quorum from the pools it is given: all N, as the README requires.
	if len(urls) != len(servers) || len(urls)/2+1 != quorum {
		fatal("urls (%d) and servers (%d) disagree with quorum %d", len(urls), len(servers), quorum)
	}
	var pools []redsyncredis.Pool
	rec := &replies{}
	for _, u := range urls {
		opt, err := redis.ParseURL(u)
		if err != nil {
			fatal("parse url: %v", err)
		}
		// Short timeouts: a stopped member must cost one attempt, not the whole lock TTL.
		opt.DialTimeout = 300 * time.Millisecond
		opt.ReadTimeout = 300 * time.Millisecond
		opt.WriteTimeout = 300 * time.Millisecond
		opt.MaxRetries = -1
		opt.PoolSize = 4
		opt.DisableIdentity = true
		pools = append(pools, recordingPool{goredis.NewPool(redis.NewClient(opt)), opt.Addr, rec})
	}
	rs := redsync.New(pools...)
	counter := redis.NewClient(&redis.Options{Addr: os.Getenv("COUNTER_ADDR")})
	ctx := context.Background()

	emit("ready go-redsync")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 1 && f[0] == "quit" {
			return
		}
		if len(f) != 5 || f[0] != "lock" {
			fatal("bad command %q", in.Text())
		}
		seq, key := f[1], f[2]
		ttl, _ := strconv.Atoi(f[3])
		hold, _ := strconv.Atoi(f[4])
		if ttl > maxTTL {
			fatal("ttl %d above maxLockTTLMillis %d", ttl, maxTTL)
		}
		// One try per command: the harness retries, so acquire_invoke is the start of the
		// attempt whose validity the client computes.
		m := rs.NewMutex(key, redsync.WithExpiry(time.Duration(ttl)*time.Millisecond),
			redsync.WithTries(1), redsync.WithDriftFactor(0.01))
		rec.start("acquire")
		emit("acquire_invoke %s %d", seq, monoNs())
		err := m.LockContext(ctx)
		now := monoNs()
		if err != nil {
			emit("acquire_fail %s %d %s", seq, now, oneLine(err))
			emit("done %s", seq)
			continue
		}
		emit("acquire_ok %s %d %d", seq, now, time.Until(m.Until()).Milliseconds())
		// With one try, a granted lock's replies are those of its one attempt.
		rec.emit(seq)

		// The critical section: a read-modify-write that loses an update when two overlap.
		v, err := counter.Get(ctx, "count:"+key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			fatal("counter get: %v", err)
		}
		time.Sleep(time.Duration(hold) * time.Millisecond)
		if err := counter.Set(ctx, "count:"+key, v+1, 0).Err(); err != nil {
			fatal("counter set: %v", err)
		}

		rec.start("release")
		emit("release_invoke %s %d", seq, monoNs())
		ok, err := m.UnlockContext(ctx)
		if err != nil || !ok {
			reason := "not held on a quorum"
			if err != nil {
				reason = oneLine(err)
			}
			emit("release_fail %s %d %s", seq, monoNs(), reason)
		} else {
			emit("release_ok %s %d", seq, monoNs())
		}
		rec.emit(seq)
		emit("done %s", seq)
	}
}
