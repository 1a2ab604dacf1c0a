// Safety-suite worker for go-redsync (github.com/go-redsync/redsync/v4 with go-redis v9).
//
// It is configured the way a user's pod is: the cluster's `<name>-client` Secret and
// `<name>-endpoints` ConfigMap mounted as directories (REDLOCK_SECRET_DIR, REDLOCK_CONFIG_DIR),
// the servers reached by their published Service names. The harness drives it over the line
// protocol described in tests/safety/src/protocol.rs; every timestamp is CLOCK_MONOTONIC in
// nanoseconds, the clock the harness and the other workers read too.
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
		pools = append(pools, goredis.NewPool(redis.NewClient(opt)))
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
		emit("acquire_invoke %s %d", seq, monoNs())
		err := m.LockContext(ctx)
		now := monoNs()
		if err != nil {
			emit("acquire_fail %s %d %s", seq, now, oneLine(err))
			emit("done %s", seq)
			continue
		}
		emit("acquire_ok %s %d %d", seq, now, time.Until(m.Until()).Milliseconds())

		// The critical section: a read-modify-write that loses an update when two overlap.
		v, err := counter.Get(ctx, "count:"+key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			fatal("counter get: %v", err)
		}
		time.Sleep(time.Duration(hold) * time.Millisecond)
		if err := counter.Set(ctx, "count:"+key, v+1, 0).Err(); err != nil {
			fatal("counter set: %v", err)
		}

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
		emit("done %s", seq)
	}
}
