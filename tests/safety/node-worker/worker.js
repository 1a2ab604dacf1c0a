// Safety-suite worker for node-redlock 4.x (npm `redlock@4` with `ioredis`).
//
// Configured the way a user's pod is: the cluster's `<name>-client` Secret and
// `<name>-endpoints` ConfigMap mounted as directories (REDLOCK_SECRET_DIR, REDLOCK_CONFIG_DIR),
// servers reached by their published Service names. Driven by the harness over the line
// protocol of tests/safety/src/protocol.rs; timestamps are CLOCK_MONOTONIC nanoseconds
// (`process.hrtime` reads that clock on Linux), shared with the harness and the other workers.
// For each lock it got, it also reports every member's reply to the acquisition and the
// release (`reply` lines), noted around node-redlock's per-server script call
// (`_executeScript`, redlock 4.2.0): node-redlock itself only says whether a quorum agreed.
"use strict";
const fs = require("fs");
const path = require("path");
const readline = require("readline");
const Redis = require("ioredis");
const Redlock = require("redlock");

const mono = () => process.hrtime.bigint().toString();
const emit = (line) => process.stdout.write(line + "\n");
const fatal = (msg) => {
  emit("error " + msg);
  process.exit(1);
};
const read = (dir, key) => fs.readFileSync(path.join(dir, key), "utf8").trim();
const oneLine = (err) => String((err && err.message) || err).split(/\s+/).join(" ");

const secretDir = process.env.REDLOCK_SECRET_DIR;
const configDir = process.env.REDLOCK_CONFIG_DIR;
const urls = read(secretDir, "urls").split(/\s+/);
const servers = read(configDir, "servers").split(/\s+/);
const quorum = Number(read(configDir, "quorum"));
const maxTTL = Number(read(configDir, "maxLockTTLMillis"));
// node-redlock computes its quorum from the clients it is given: all N, as the README requires.
if (urls.length !== servers.length || Math.floor(urls.length / 2) + 1 !== quorum) {
  fatal(`urls (${urls.length}) and servers (${servers.length}) disagree with quorum ${quorum}`);
}
// No offline queue and short timeouts: a command to a member that is down must fail now, not
// be sent whenever the member returns, and a stopped member must cost one attempt only.
const clients = urls.map(
  (u) =>
    new Redis(u, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      connectTimeout: 300,
      commandTimeout: 300,
      retryStrategy: () => 100,
    }),
);
for (const c of clients) c.on("error", () => {}); // reconnects on its own; failures count as no vote
const redlock = new Redlock(clients, { driftFactor: 0.01, retryCount: 0 });
redlock.on("clientError", () => {});

// The `host:port` each client dials (no credentials), by its index in redlock.servers.
const members = urls.map((u) => {
  const url = new URL(u);
  return `${url.hostname}:${url.port || 6379}`;
});
// Each member's reply to the lock script (acquire) and the unlock script (release) of the
// operation in flight, in the order they arrived. node-redlock calls back once per server
// and settles only when every server has answered (or timed out), so after `lock` and
// `unlock` return the list is complete.
let replies = [];
const executeScript = redlock._executeScript;
if (typeof executeScript !== "function") fatal("redlock has no _executeScript: not redlock 4.2.0");
redlock._executeScript = function (server, name, args, callback) {
  const member = members[this.servers.indexOf(server)];
  const step = name === "lockScript" ? "acquire" : name === "unlockScript" ? "release" : name;
  return executeScript.call(this, server, name, args, (err, response) => {
    let outcome, detail = "";
    if (err) {
      outcome = "error";
      detail = oneLine(err);
    } else if (response === 1 || response === "1") {
      outcome = "ok";
    } else {
      outcome = "no";
      detail = step === "acquire" ? "key held" : "not ours or gone";
    }
    replies.push({ t: mono(), step, member, outcome, detail });
    return callback(err, response);
  });
};
// Writes the replies of `step` as `reply` lines of operation seq.
const emitReplies = (seq, step) => {
  for (const r of replies.filter((r) => r.step === step)) {
    emit(`reply ${seq} ${r.t} ${r.step} ${r.member} ${r.outcome}${r.detail ? " " + r.detail : ""}`);
  }
};
const counter = new Redis(process.env.COUNTER_ADDR);

async function run(seq, key, ttl, hold) {
  if (ttl > maxTTL) fatal(`ttl ${ttl} above maxLockTTLMillis ${maxTTL}`);
  replies = [];
  emit(`acquire_invoke ${seq} ${mono()}`);
  let lock;
  try {
    lock = await redlock.lock(key, ttl);
  } catch (err) {
    emit(`acquire_fail ${seq} ${mono()} ${oneLine(err)}`);
    return;
  }
  emit(`acquire_ok ${seq} ${mono()} ${lock.expiration - Date.now()}`);
  // With no retry, a granted lock's replies are those of its one attempt.
  emitReplies(seq, "acquire");
  replies = [];
  // The critical section: a read-modify-write that loses an update when two overlap.
  const v = Number((await counter.get("count:" + key)) || 0);
  await new Promise((r) => setTimeout(r, hold));
  await counter.set("count:" + key, String(v + 1));
  emit(`release_invoke ${seq} ${mono()}`);
  try {
    await lock.unlock();
    emit(`release_ok ${seq} ${mono()}`);
  } catch (err) {
    emit(`release_fail ${seq} ${mono()} ${oneLine(err)}`);
  }
  emitReplies(seq, "release");
}

// Commands are handled one at a time, in order: the harness sends the next after `done`.
let queue = Promise.resolve();
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  const f = line.trim().split(/\s+/);
  if (f.length === 1 && f[0] === "quit") process.exit(0);
  if (f.length !== 5 || f[0] !== "lock") fatal(`bad command ${JSON.stringify(line)}`);
  const [, seq, key, ttl, hold] = f;
  queue = queue
    .then(() => run(seq, key, Number(ttl), Number(hold)))
    .then(() => emit(`done ${seq}`))
    .catch((err) => fatal(oneLine(err)));
});
rl.on("close", () => process.exit(0));
emit("ready node-redlock");
