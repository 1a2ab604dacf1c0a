//! `kubectl redlock client-config`: a ready configuration for each client library docs/clients.md
//! documents, filled in from what the operator publishes (`<name>-endpoints`, `<name>-client`).
//! Pure. The password never appears: the snippets read the client Secret's `urls` from an
//! environment variable, so the output can be pasted into a repository.

use std::fmt::Write;

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// node-redlock 4.x with ioredis
    Node,
    /// go-redsync v4 with go-redis v9
    Go,
    /// pottery with redis-py
    Python,
    /// redlock-py (the Python client the Redlock spec lists)
    PythonRedlock,
    /// redlock-rb (the Ruby reference client of the Redlock spec)
    Ruby,
    /// redlock-php over phpredis
    Php,
    /// RedLock.net with StackExchange.Redis
    Dotnet,
    /// rslock
    Rust,
    /// Redisson's RedissonRedLock
    Java,
}

/// What the operator published for one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Published {
    pub name: String,
    pub namespace: String,
    /// `servers` of `<name>-endpoints`: all N addresses, slot order.
    pub servers: Vec<String>,
    pub quorum: i32,
    pub max_lock_ttl: String,
    pub max_lock_ttl_millis: u64,
    /// The Secret with `ca.crt` when the instances serve TLS.
    pub tls_secret: Option<String>,
}

/// The lock TTL the snippets use: 10 s, or maxLockTTL when that is shorter.
fn example_ttl_ms(p: &Published) -> u64 {
    p.max_lock_ttl_millis.min(10_000)
}

/// A ready configuration snippet for `lang`. Long on purpose: one arm per client, each a
/// template that reads top to bottom as the user will paste it.
pub(crate) fn snippet(lang: Lang, p: &Published) -> String {
    let mut out = String::new();
    let comment = match lang {
        Lang::Python | Lang::PythonRedlock | Lang::Ruby => "#",
        _ => "//",
    };
    let _ = writeln!(
        out,
        "{comment} RedlockCluster {}/{}: {} servers, quorum {}, maxLockTTL {} ({} ms).",
        p.namespace,
        p.name,
        p.servers.len(),
        p.quorum,
        p.max_lock_ttl,
        p.max_lock_ttl_millis
    );
    for s in &p.servers {
        let _ = writeln!(out, "{comment}   {s}");
    }
    let _ = writeln!(
        out,
        "{comment} Use all {} servers (never only the ready ones) and never a lock TTL above {} ms.",
        p.servers.len(),
        p.max_lock_ttl_millis
    );
    let _ = writeln!(out, "{comment} In the client's container spec:");
    let _ = writeln!(out, "{comment}   env:");
    let _ = writeln!(out, "{comment}     - name: REDLOCK_URLS");
    let _ = writeln!(
        out,
        "{comment}       valueFrom: {{secretKeyRef: {{name: {}-client, key: urls}}}}",
        p.name
    );
    let _ = writeln!(out, "{comment}     - name: REDLOCK_MAX_TTL_MS");
    let _ = writeln!(
        out,
        "{comment}       valueFrom: {{configMapKeyRef: {{name: {}-endpoints, key: maxLockTTLMillis}}}}",
        p.name
    );
    if let Some(tls) = &p.tls_secret {
        let _ = writeln!(
            out,
            "{comment} TLS: the urls are rediss://; trust ca.crt of Secret {tls} (mount it and point the client's TLS options at it)."
        );
    }
    out.push('\n');
    let ttl = example_ttl_ms(p);
    out.push_str(&match lang {
        Lang::Node => format!(
            r#"const Redis = require("ioredis");
const Redlock = require("redlock"); // npm redlock@4
const clients = process.env.REDLOCK_URLS.trim().split("\n").map((u) => new Redis(u));
const redlock = new Redlock(clients, {{ driftFactor: 0.01, retryCount: 10, retryDelay: 200 }});
async function main() {{
  const lock = await redlock.lock("orders:42", {ttl}); // ms, <= {max}
  try {{ /* critical section */ }} finally {{ await lock.unlock(); }}
}}
main()
  .catch((err) => {{ console.error(err); process.exitCode = 1; }})
  .finally(() => clients.forEach((c) => c.quit())); // the connections keep Node running
"#,
            max = p.max_lock_ttl_millis
        ),
        Lang::Go => format!(
            r#"// github.com/go-redsync/redsync/v4, .../redsync/v4/redis/goredis/v9, github.com/redis/go-redis/v9
var pools []redsyncredis.Pool
for _, u := range strings.Fields(os.Getenv("REDLOCK_URLS")) {{
    opt, err := redis.ParseURL(u)
    if err != nil {{ log.Fatal(err) }}
    pools = append(pools, goredis.NewPool(redis.NewClient(opt)))
}}
rs := redsync.New(pools...)
m := rs.NewMutex("orders:42", redsync.WithExpiry({ttl}*time.Millisecond)) // <= {max} ms
if err := m.Lock(); err != nil {{ return err }}
defer m.Unlock()
"#,
            max = p.max_lock_ttl_millis
        ),
        Lang::Python => format!(
            r#"import os
from redis import Redis
from pottery import Redlock
masters = {{Redis.from_url(u) for u in os.environ["REDLOCK_URLS"].split()}}
lock = Redlock(key="orders:42", masters=masters, auto_release_time={secs})  # seconds, <= {max_s}
with lock:
    ...  # critical section
"#,
            secs = ttl as f64 / 1000.0,
            max_s = p.max_lock_ttl_millis as f64 / 1000.0
        ),
        Lang::PythonRedlock => format!(
            r#"import os
from redlock import Redlock  # pip: redlock-py
dlm = Redlock(os.environ["REDLOCK_URLS"].split())
lock = dlm.lock("orders:42", {ttl})  # ms, <= {max}
if lock:
    try:
        ...  # critical section
    finally:
        dlm.unlock(lock)
"#,
            max = p.max_lock_ttl_millis
        ),
        Lang::Ruby => format!(
            r#"require "redlock" # gem: redlock (redlock-rb 2.x)
lock_manager = Redlock::Client.new(ENV.fetch("REDLOCK_URLS").split)
lock_manager.lock("orders:42", {ttl}) do |locked| # ms, <= {max}
  if locked
    # critical section
  end
end
"#,
            max = p.max_lock_ttl_millis
        ),
        Lang::Php => format!(
            r#"// composer: signe/redlock-php, with the phpredis extension. Its server tuples carry no
// user name, so each server is handed over connected and logged in.
$servers = [];
foreach (preg_split('/\s+/', trim(getenv('REDLOCK_URLS'))) as $url) {{
    $u = parse_url($url);
    $redis = new \Redis();
    $host = ($u['scheme'] === 'rediss' ? 'tls://' : '') . $u['host'];
    $redis->connect($host, $u['port'], 0.5);
    if (isset($u['user'])) {{ $redis->auth([urldecode($u['user']), urldecode($u['pass'])]); }}
    $servers[] = $redis;
}}
$redLock = new \RedLock\RedLock($servers);
$lock = $redLock->lock('orders:42', {ttl}); // ms, <= {max}
if ($lock) {{
    try {{ /* critical section */ }} finally {{ $redLock->unlock($lock); }}
}}
"#,
            max = p.max_lock_ttl_millis
        ),
        Lang::Dotnet => format!(
            r#"// NuGet: RedLock.net, StackExchange.Redis. RedLock.net's own endpoint type has a password
// and no user name (it would log in as `default`, which is off): hand it multiplexers that
// StackExchange.Redis logged in as the client user.
var multiplexers = new List<RedLockMultiplexer>();
foreach (var url in Environment.GetEnvironmentVariable("REDLOCK_URLS")!.Split((char[]?)null, StringSplitOptions.RemoveEmptyEntries))
{{
    var u = new Uri(url);
    var login = u.UserInfo.Split(':', 2);
    var options = new ConfigurationOptions {{ EndPoints = {{ {{ u.Host, u.Port }} }}, Ssl = u.Scheme == "rediss", AbortOnConnectFail = false }};
    if (login.Length == 2) {{ options.User = Uri.UnescapeDataString(login[0]); options.Password = Uri.UnescapeDataString(login[1]); }}
    multiplexers.Add(ConnectionMultiplexer.Connect(options));
}}
using var factory = RedLockFactory.Create(multiplexers);
await using var redLock = await factory.CreateLockAsync("orders:42", TimeSpan.FromMilliseconds({ttl})); // <= {max} ms
if (redLock.IsAcquired) {{ /* critical section */ }}
"#,
            max = p.max_lock_ttl_millis
        ),
        Lang::Rust => format!(
            r#"// crates.io: rslock
let urls: Vec<String> = std::env::var("REDLOCK_URLS")?.split_whitespace().map(String::from).collect();
let locks = rslock::LockManager::new(urls);
let lock = locks.lock(b"orders:42", std::time::Duration::from_millis({ttl})).await?; // <= {max} ms
// critical section
locks.unlock(&lock).await;
"#,
            max = p.max_lock_ttl_millis
        ),
        Lang::Java => format!(
            r#"// Maven: org.redisson:redisson. RedissonRedLock is deprecated upstream but is Redisson's
// Redlock over independent masters. Always pass a lease time: without one Redisson's watchdog
// keeps the lock alive with its own TTL (30 s by default), which may exceed maxLockTTL.
List<RLock> locks = new ArrayList<>();
for (String url : System.getenv("REDLOCK_URLS").trim().split("\\s+")) {{
    URI u = URI.create(url);
    Config config = new Config();
    SingleServerConfig server = config.useSingleServer()
        .setAddress(u.getScheme() + "://" + u.getHost() + ":" + u.getPort());
    if (u.getUserInfo() != null) {{
        String[] login = u.getUserInfo().split(":", 2);
        server.setUsername(login[0]).setPassword(login[1]);
    }}
    locks.add(Redisson.create(config).getLock("orders:42"));
}}
RLock lock = new RedissonRedLock(locks.toArray(new RLock[0]));
if (lock.tryLock(5_000, {ttl}, TimeUnit.MILLISECONDS)) {{ // lease <= {max} ms
    try {{ /* critical section */ }} finally {{ lock.unlock(); }}
}}
"#,
            max = p.max_lock_ttl_millis
        ),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(max_ms: u64, tls: bool) -> Published {
        Published {
            name: "locks".into(),
            namespace: "team".into(),
            servers: (0..3).map(|i| format!("locks-{i}.team.svc:6379")).collect(),
            quorum: 2,
            max_lock_ttl: format!("{}ms", max_ms),
            max_lock_ttl_millis: max_ms,
            tls_secret: tls.then(|| "locks-tls".to_owned()),
        }
    }

    #[test]
    fn every_language_reads_the_published_objects_and_caps_the_ttl() {
        for lang in Lang::value_variants() {
            let s = snippet(*lang, &published(30_000, false));
            assert!(s.contains("REDLOCK_URLS"), "{lang:?}");
            assert!(s.contains("name: locks-client, key: urls"), "{lang:?}\n{s}");
            assert!(s.contains("locks-2.team.svc:6379"), "{lang:?}");
            assert!(s.contains("quorum 2"), "{lang:?}");
            assert!(!s.contains("TLS"), "{lang:?}");
            // A TTL of 10 s is used below a 30 s maxLockTTL; 2 s is used when that is the max.
            let short = snippet(*lang, &published(2_000, true));
            assert!(short.contains("locks-tls"), "{lang:?}");
            let ttl_shown = match lang {
                Lang::Python => ["10", "2"],
                _ => ["10000", "2000"],
            };
            assert!(s.contains(ttl_shown[0]), "{lang:?}\n{s}");
            assert!(
                short.contains(ttl_shown[1]) && !short.contains("10000"),
                "{lang:?}\n{short}"
            );
        }
    }
}
