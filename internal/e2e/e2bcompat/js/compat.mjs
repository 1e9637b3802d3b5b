// A program written for E2B's JavaScript SDK, run unchanged against cove:
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY name cove's E2B listeners
// and a cove key of the e2b shape. OTHER_TEAM_KEY is another team's key.
// Each check prints "ok NAME"; the first failure ends the program with 1.
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError, FileType, FilesystemEventType, InvalidArgumentError, NotFoundError, TimeoutError } from 'e2b'

const checks = []
const check = (name, fn) => checks.push([name, fn])
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

let sbx
const timings = {}

check('create', async () => {
  const t0 = Date.now()
  sbx = await Sandbox.create('base', { metadata: { suite: 'compat' }, envs: { SANDBOX_VAR: 'from-create' } })
  const r = await sbx.commands.run('echo first')
  timings.createToFirstCommandMs = Date.now() - t0
  assert.equal(r.stdout, 'first\n')
  assert.match(sbx.sandboxId, /^sbx_/)
})

check('getInfo', async () => {
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { suite: 'compat' })
  assert.ok(info.endAt > new Date())
  assert.equal(await sbx.isRunning(), true)
})

check('list with a metadata filter', async () => {
  const page = await Sandbox.list({ query: { metadata: { suite: 'compat' } } }).nextItems()
  assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
  const none = await Sandbox.list({ query: { metadata: { suite: 'other' } } }).nextItems()
  assert.equal(none.length, 0)
})

check('setTimeout', async () => {
  await sbx.setTimeout(120_000)
  const info = await sbx.getInfo()
  const left = info.endAt.getTime() - Date.now()
  assert.ok(left > 100_000 && left <= 122_000, `${left} ms left`)
})

check('getMetrics', async () => {
  assert.ok(Array.isArray(await sbx.getMetrics()))
})

check('run: output, exit code, environment, working directory, user', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2; echo "$SANDBOX_VAR $CMD_VAR"; pwd; id -un', { envs: { CMD_VAR: 'from-run' } })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\nfrom-create from-run\n/home/user\nuser\n')
  assert.equal(r.stderr, 'err\n')
  const root = await sbx.commands.run('id -un', { user: 'root' })
  assert.equal(root.stdout, 'root\n')
  const cwd = await sbx.commands.run('pwd', { cwd: '/tmp' })
  assert.equal(cwd.stdout, '/tmp\n')
  await assert.rejects(sbx.commands.run('echo before; exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3 && e.stdout === 'before\n')
})

check('inotify and user xattrs work inside, as base promises', async () => {
  // IN_CREATE on the user's home; a file made there is reported.
  const code = [
    'import ctypes, os',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'fd = libc.inotify_init1(0)',
    'assert fd >= 0, ctypes.get_errno()',
    "assert libc.inotify_add_watch(fd, b'/home/user', 0x100) >= 0, ctypes.get_errno()",
    "open('/home/user/inotified.txt', 'w').close()",
    "print('events', len(os.read(fd, 4096)) > 0)",
    "os.setxattr('/home/user/inotified.txt', 'user.mine', b'v')",
    "print(os.getxattr('/home/user/inotified.txt', 'user.mine').decode())",
  ].join('\n')
  await sbx.files.write('inotify_check.py', code)
  const r = await sbx.commands.run('python3 inotify_check.py')
  assert.equal(r.stdout, 'events True\nv\n')
})

check('sudo: passwordless, to root, as base promises', async () => {
  const r = await sbx.commands.run('id -un; sudo -n id -u; sudo -n id -un; grep NoNewPrivs /proc/self/status')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'user\n0\nroot\nNoNewPrivs:\t0\n')
  // E2B's envVars test: a command's envs reach that command only, and
  // sudo runs without a password or a terminal.
  const scoped = await sbx.commands.run('echo $FOO', { envs: { FOO: 'bar' } })
  assert.equal(scoped.stdout.trim(), 'bar')
  const next = await sbx.commands.run('sudo echo "$FOO"')
  assert.equal(next.exitCode, 0)
  assert.equal(next.stdout.trim(), '')
})

check('run: callbacks see output as it comes', async () => {
  const seen = []
  await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.2; done', { onStdout: (d) => seen.push(d) })
  assert.equal(seen.join(''), '1\n2\n3\n')
})

check('background, list, connect, kill', async () => {
  const h = await sbx.commands.run('sleep 60', { background: true })
  assert.ok(h.pid > 0)
  const procs = await sbx.commands.list()
  const p = procs.find((x) => x.pid === h.pid)
  assert.ok(p, `pid ${h.pid} not in ${JSON.stringify(procs)}`)
  assert.deepEqual([p.cmd, p.args], ['/bin/bash', ['-l', '-c', 'sleep 60']])
  const c = await sbx.commands.connect(h.pid)
  assert.equal(c.pid, h.pid)
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(c.wait(), (e) => e instanceof CommandExitError)
  assert.ok(!(await sbx.commands.list()).some((x) => x.pid === h.pid))
  assert.equal(await sbx.commands.kill(h.pid), false)
  await assert.rejects(sbx.commands.connect(999_999_999), NotFoundError)
})

check("pids are the sandbox's own: ps, kill and connect by them", async () => {
  const h = await sbx.commands.run('sleep 301', { background: true })
  // The process of that pid, as the sandbox's own ps and /proc see it.
  const ps = await sbx.commands.run(`ps -o pid= -p ${h.pid}; tr '\\0' ' ' < /proc/${h.pid}/cmdline`)
  assert.match(ps.stdout, new RegExp(`^\\s*${h.pid}\\n.*sleep 301`), ps.stdout)
  // A pid found by pgrep inside the sandbox names it here too.
  const found = (await sbx.commands.run("pgrep -f '^(/bin/bash -l -c )?sleep 301'")).stdout.trim().split('\n').map(Number)
  assert.deepEqual(found, [h.pid], `pgrep found ${found}, the start event said ${h.pid}`)
  const c = await sbx.commands.connect(found[0])
  assert.equal(c.pid, found[0])
  assert.ok((await sbx.commands.list()).some((x) => x.pid === h.pid))
  // kill from another command ends it, for both streams.
  const k = await sbx.commands.run(`kill ${h.pid}`)
  assert.equal(k.exitCode, 0)
  await assert.rejects(h.wait(), CommandExitError)
  await assert.rejects(c.wait(), CommandExitError)
  assert.ok(!(await sbx.commands.list()).some((x) => x.pid === h.pid))
  // The pid of a process that ended names nothing.
  await assert.rejects(sbx.commands.connect(h.pid), NotFoundError)
})

check('tags: a process started with one is listed with it and found by it', async () => {
  // E2B's SDK only reads tags (list); a start with one is envd's protocol
  // itself: Connect's streaming JSON, one enveloped message.
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken }
  const msg = new TextEncoder().encode(JSON.stringify({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'sleep 304'] }, tag: 'compat-tag' }))
  const env = new Uint8Array(5 + msg.length)
  new DataView(env.buffer).setUint32(1, msg.length)
  env.set(msg, 5)
  const ac = new AbortController()
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/Start`, {
    method: 'POST', headers: { ...headers, 'Content-Type': 'application/connect+json' }, body: env, signal: ac.signal,
  })
  assert.equal(res.status, 200)
  const reader = res.body.getReader()
  let buf = new Uint8Array(0)
  while (buf.length < 5 || buf.length < 5 + new DataView(buf.buffer).getUint32(1)) {
    const { value, done } = await reader.read()
    assert.ok(!done, 'the start stream ended before its first message')
    buf = new Uint8Array([...buf, ...value])
  }
  const first = JSON.parse(new TextDecoder().decode(buf.slice(5, 5 + new DataView(buf.buffer).getUint32(1))))
  const pid = first.event.start.pid
  ac.abort() // closing the stream leaves the process running
  const listed = (await sbx.commands.list()).find((x) => x.pid === pid)
  assert.equal(listed?.tag, 'compat-tag', JSON.stringify(listed))
  const signal = (selector) => fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/SendSignal`, {
    method: 'POST', headers: { ...headers, 'Content-Type': 'application/json' }, body: JSON.stringify({ process: selector, signal: 'SIGNAL_SIGKILL' }),
  })
  assert.equal((await signal({ tag: 'compat-tag' })).status, 200)
  for (let i = 0; i < 100 && (await sbx.commands.list()).some((x) => x.pid === pid); i++) await sleep(50)
  assert.ok(!(await sbx.commands.list()).some((x) => x.pid === pid), 'the tagged process still runs')
  assert.equal((await signal({ tag: 'compat-tag' })).status, 404)
})

check('closing a stream leaves the process running', async () => {
  const h = await sbx.commands.run('sleep 1; echo done > /tmp/left-running', { background: true })
  await h.disconnect()
  const r = await sbx.commands.run('for i in $(seq 50); do test -s /tmp/left-running && break; sleep 0.1; done; cat /tmp/left-running')
  assert.equal(r.stdout, 'done\n')
})

check('output fans out to every stream', async () => {
  const h = await sbx.commands.run('sleep 1; echo shared', { background: true })
  const c = await sbx.commands.connect(h.pid)
  const [a, b] = await Promise.all([h.wait(), c.wait()])
  assert.equal(a.stdout, 'shared\n')
  assert.equal(b.stdout, 'shared\n')
})

check('stdin', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'line one\n')
  await sbx.commands.sendStdin(h.pid, new TextEncoder().encode('line two\n'))
  await sbx.commands.closeStdin(h.pid)
  assert.equal((await h.wait()).stdout, 'line one\nline two\n')
})

check('a timeout kills the process and ends the stream', async () => {
  await assert.rejects(sbx.commands.run('sleep 30; echo never > /tmp/timed-out', { timeoutMs: 1500 }), TimeoutError)
  // The kill is the server's, at the deadline it read from the request:
  // wait for it with a bound, not a fixed pause.
  const r = await sbx.commands.run('for i in $(seq 100); do pgrep -x sleep >/dev/null || break; sleep 0.1; done; pgrep -x sleep || echo none; test -e /tmp/timed-out && echo written || echo absent')
  assert.equal(r.stdout, 'none\nabsent\n')
})

check('files: write and read in every form', async () => {
  const w = await sbx.files.write('notes/a.txt', 'hello files')
  assert.equal(w.path, '/home/user/notes/a.txt')
  assert.equal(await sbx.files.read('/home/user/notes/a.txt'), 'hello files')
  assert.deepEqual(await sbx.files.read('notes/a.txt', { format: 'bytes' }), new TextEncoder().encode('hello files'))
  assert.equal(await (await sbx.files.read('notes/a.txt', { format: 'blob' })).text(), 'hello files')
  const many = await sbx.files.write([{ path: 'deep/er/one.txt', data: '1' }, { path: '/tmp/two.txt', data: new TextEncoder().encode('2') }])
  assert.deepEqual(many.map((e) => e.path), ['/home/user/deep/er/one.txt', '/tmp/two.txt'])
  assert.equal(await sbx.files.read('deep/er/one.txt'), '1')
  await sbx.files.write('gz.txt', 'zipped', { gzip: true })
  assert.equal(await sbx.files.read('gz.txt', { gzip: true }), 'zipped')
  assert.equal((await sbx.commands.run('cat ~/gz.txt; echo; stat -c %U ~/gz.txt')).stdout, 'zipped\nuser\n')
  await sbx.files.write('/root/owned', 'r', { user: 'root' })
  assert.equal((await sbx.commands.run('stat -c %U /root/owned', { user: 'root' })).stdout, 'root\n')
})

check('files: info, list, exists, makeDir, rename, remove', async () => {
  const info = await sbx.files.getInfo('notes/a.txt')
  assert.equal(info.type, FileType.FILE)
  assert.equal(info.size, 11)
  assert.equal(info.permissions, '-rw-r--r--')
  assert.equal(info.owner, 'user')
  await sbx.commands.run('ln -s notes/a.txt ~/link')
  assert.equal((await sbx.files.getInfo('link')).symlinkTarget, '/home/user/notes/a.txt')
  assert.equal(await sbx.files.exists('notes/a.txt'), true)
  assert.equal(await sbx.files.exists('notes/none.txt'), false)
  assert.equal(await sbx.files.makeDir('made/x'), true)
  assert.equal(await sbx.files.makeDir('made/x'), false)
  const listed = (await sbx.files.list('deep', { depth: 2 })).map((e) => e.path)
  assert.deepEqual(listed, ['/home/user/deep/er', '/home/user/deep/er/one.txt'])
  assert.equal((await sbx.files.rename('notes/a.txt', 'notes/b.txt')).path, '/home/user/notes/b.txt')
  await sbx.files.remove('notes/b.txt')
  assert.equal(await sbx.files.exists('notes/b.txt'), false)
  await assert.rejects(sbx.files.read('notes/b.txt'), NotFoundError)
})

check('files: watch a directory, recursively', async () => {
  await sbx.files.makeDir('watched')
  const seen = []
  let done
  const finished = new Promise((r) => { done = r })
  const handle = await sbx.files.watchDir('watched', (ev) => {
    seen.push(`${ev.type}:${ev.name}`)
    if (ev.type === FilesystemEventType.WRITE && ev.name === 'sub/f.txt') done()
  }, { recursive: true })
  await sbx.files.makeDir('watched/sub')
  await sbx.files.write('watched/sub/f.txt', 'watched')
  await finished
  await handle.stop()
  assert.ok(seen.includes('create:sub'), seen.join(' '))
})

check('files: metadata as user.e2b.* extended attributes', async () => {
  const meta = { author: 'mish', purpose: 'upload' }
  const w = await sbx.files.write('meta/a.txt', 'with metadata', { metadata: meta })
  assert.deepEqual(w.metadata, meta)
  assert.deepEqual((await sbx.files.getInfo('meta/a.txt')).metadata, meta)
  const octet = await sbx.files.write('meta/b.txt', 'octet', { metadata: meta, useOctetStream: true })
  assert.deepEqual(octet.metadata, meta)
  const many = await sbx.files.writeFiles([{ path: 'meta/c.txt', data: '1' }, { path: 'meta/d.txt', data: '2' }], { metadata: { source: 'compat' } })
  for (const e of many) assert.deepEqual((await sbx.files.getInfo(e.path)).metadata, { source: 'compat' })
  const listed = (await sbx.files.list('meta')).find((e) => e.name === 'a.txt')
  assert.deepEqual(listed.metadata, meta)
  assert.deepEqual((await sbx.files.rename('meta/a.txt', 'meta/renamed.txt')).metadata, meta)
  // They are the file's own xattrs, on the sandbox's overlay, which its
  // user reads as any xattr.
  const py = (code, user) => sbx.commands.run(`python3 -c "${code}"`, { user })
  assert.equal((await py("import os; print(os.getxattr('/home/user/meta/renamed.txt', 'user.e2b.author').decode())")).stdout, 'mish\n')
  // Set in the sandbox, shown as metadata; other user.* are not metadata.
  await sbx.files.write('meta/oob.txt', 'x')
  await py("import os; os.setxattr('/home/user/meta/oob.txt', 'user.e2b.set', b'inside'); os.setxattr('/home/user/meta/oob.txt', 'user.other', b'x')")
  assert.deepEqual((await sbx.files.getInfo('meta/oob.txt')).metadata, { set: 'inside' })
  // Written again without metadata: none left.
  const again = await sbx.files.write('meta/renamed.txt', 'second')
  assert.equal(again.metadata, undefined)
  assert.equal((await sbx.files.getInfo('meta/renamed.txt')).metadata, undefined)
  // Neither the sandbox's user nor its root sets trusted.* or security.*
  // xattrs, and the user does not change root's file's metadata.
  for (const user of ['user', 'root']) {
    const r = await py("import os\nfor n in ('trusted.x', 'security.x'):\n  try:\n    os.setxattr('/tmp/two.txt', n, b'v'); print('set', n)\n  except OSError as e: print('refused', n)", user)
    assert.equal(r.stdout, 'refused trusted.x\nrefused security.x\n', `as ${user}`)
  }
  await sbx.files.write('/root/meta.txt', 'r', { user: 'root', metadata: { owner: 'root' } })
  const r = await sbx.commands.run(`python3 -c "import os; os.setxattr('/root/meta.txt', 'user.e2b.owner', b'user')" 2>&1 || echo refused`)
  assert.match(r.stdout, /refused/)
  assert.deepEqual((await sbx.files.getInfo('/root/meta.txt', { user: 'root' })).metadata, { owner: 'root' })
  // Through a symlink to / a write stays in the sandbox's own root.
  await sbx.commands.run('ln -sfn / ~/rootlink')
  await sbx.files.write(`rootlink/tmp/${process.env.ESCAPE_NAME}`, 'inside', { metadata: { where: 'sandbox' } })
  assert.equal((await sbx.commands.run(`cat /tmp/${process.env.ESCAPE_NAME}`)).stdout, 'inside')
  await assert.rejects(sbx.files.write('bad.txt', 'x', { metadata: { 'bad key': 'v' } }), InvalidArgumentError)
})

check('signed download and upload URLs', async () => {
  await sbx.files.write('signed.txt', 'signed content')
  const down = await sbx.downloadUrl('signed.txt', { useSignatureExpiration: 60 })
  assert.ok(!down.includes(sbx.sandboxId), down)
  assert.match(new URL(down).searchParams.get('signature'), /^v1_/)
  let res = await fetch(down)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'signed content')
  const asRoot = await sbx.downloadUrl('/root/owned', { user: 'root' })
  res = await fetch(asRoot)
  assert.equal(await res.text(), 'r')

  const up = await sbx.uploadUrl('uploaded.txt', { useSignatureExpiration: 60 })
  const form = () => { const f = new FormData(); f.append('file', 'file content'); return f }
  res = await fetch(up, { method: 'POST', body: form() })
  assert.equal(res.status, 200)
  assert.deepEqual(await res.json(), [{ name: 'uploaded.txt', path: '/home/user/uploaded.txt', type: 'file' }])
  assert.equal(await sbx.files.read('uploaded.txt'), 'file content')

  const expired = await sbx.downloadUrl('signed.txt', { useSignatureExpiration: -10 })
  res = await fetch(expired)
  assert.equal(res.status, 401)
  assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })
  res = await fetch(await sbx.uploadUrl('late.txt', { useSignatureExpiration: -100 }), { method: 'POST', body: form() })
  assert.equal(res.status, 401)
  assert.deepEqual(await res.json(), { code: 401, message: 'signature is already expired' })

  // A read URL does not write, a write URL does not read.
  res = await fetch(await sbx.downloadUrl('signed.txt', { useSignatureExpiration: 60 }), { method: 'POST', body: form() })
  assert.equal(res.status, 401)
  assert.equal(await sbx.files.read('signed.txt'), 'signed content')
  res = await fetch(up)
  assert.equal(res.status, 401)
  // Nor another path.
  res = await fetch(down.replace('signed.txt', 'uploaded.txt'))
  assert.equal(res.status, 401)
})

check("a signed URL opens only its own sandbox, never another team's", async () => {
  const other = await Sandbox.create('base', { apiKey: process.env.OTHER_TEAM_KEY, secure: true })
  try {
    await other.files.write('whose.txt', 'the other team')
    await sbx.files.write('whose.txt', 'ours')
    let res = await fetch(await other.downloadUrl('whose.txt'))
    assert.equal(await res.text(), 'the other team')
    const ours = await sbx.downloadUrl('whose.txt', { useSignatureExpiration: 60 })
    assert.equal(await (await fetch(ours)).text(), 'ours')
    // Pointed at the other sandbox, our signature opens nothing.
    res = await fetch(ours, { headers: { 'E2b-Sandbox-Id': other.sandboxId } })
    assert.equal(res.status, 401)
    const forged = new URL(ours)
    forged.searchParams.set('signature', 'v1_' + Buffer.alloc(32).toString('base64').replace(/=+$/, ''))
    assert.equal((await fetch(forged)).status, 401)
  } finally {
    await other.kill()
  }
})

// envd's unary calls, as E2B's Python SDK makes them for polled
// watchers (the JavaScript SDK has none): JSON over Connect.
const envd = async (method, body, box = sbx) => {
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/${method}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': box.sandboxId, 'X-Access-Token': box.envdAccessToken },
    body: JSON.stringify(body),
  })
  return { status: res.status, body: await res.json() }
}
let watcherId

check('files: polled watchers', async () => {
  await sbx.files.makeDir('polled')
  const w = await envd('filesystem.Filesystem/CreateWatcher', { path: 'polled', recursive: true })
  assert.equal(w.status, 200, JSON.stringify(w.body))
  watcherId = w.body.watcherId
  const events = async () => {
    const r = await envd('filesystem.Filesystem/GetWatcherEvents', { watcherId })
    assert.equal(r.status, 200, JSON.stringify(r.body))
    return (r.body.events ?? []).map((e) => `${e.type}:${e.name}`)
  }
  // The sandbox's watch reports a change soon after it is made: read
  // until every event wanted has come (reads add up; none repeats one).
  const until = async (want) => {
    const seen = []
    for (let i = 0; i < 300 && !want.every((w) => seen.includes(w)); i++) {
      if (i > 0) await sleep(100)
      seen.push(...(await events()))
    }
    assert.ok(want.every((w) => seen.includes(w)), `${seen.join(' ')}; want ${want.join(' ')}`)
  }
  assert.deepEqual(await events(), [])
  await sbx.files.write('polled/sub/a.txt', 'polled')
  await until(['EVENT_TYPE_CREATE:sub', 'EVENT_TYPE_CREATE:sub/a.txt', 'EVENT_TYPE_WRITE:sub/a.txt'])
  await sbx.commands.run('rm ~/polled/sub/a.txt')
  await until(['EVENT_TYPE_REMOVE:sub/a.txt'])
  // A file made and removed again between two reads is reported: the
  // watcher reads the watch's journal, not listings.
  await sbx.commands.run('touch ~/polled/brief && rm ~/polled/brief')
  await until(['EVENT_TYPE_CREATE:brief', 'EVENT_TYPE_REMOVE:brief'])
  const gone = await envd('filesystem.Filesystem/CreateWatcher', { path: 'polled' })
  assert.equal((await envd('filesystem.Filesystem/RemoveWatcher', { watcherId: gone.body.watcherId })).status, 200)
  assert.equal((await envd('filesystem.Filesystem/GetWatcherEvents', { watcherId: gone.body.watcherId })).status, 404)
})

check("another team's key finds nothing", async () => {
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: process.env.OTHER_TEAM_KEY }), NotFoundError)
  assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: process.env.OTHER_TEAM_KEY }), false)
  await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: process.env.OTHER_TEAM_KEY }), NotFoundError)
  assert.equal(await sbx.isRunning(), true)
})

check('an ID without its token opens nothing', async () => {
  const other = await Sandbox.create('base', { apiKey: process.env.OTHER_TEAM_KEY })
  try {
    const url = process.env.E2B_SANDBOX_URL
    const rpc = (headers) => fetch(`${url}/process.Process/List`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, ...headers }, body: '{}',
    })
    assert.equal((await rpc({})).status, 401)
    assert.equal((await rpc({ 'X-Access-Token': other.envdAccessToken ?? other.sandboxId })).status, 401)
    assert.equal((await rpc({ 'X-Access-Token': sbx.envdAccessToken })).status, 200)
    // Another sandbox's own token finds nothing of this one's watcher.
    assert.equal((await envd('filesystem.Filesystem/GetWatcherEvents', { watcherId }, other)).status, 404)
  } finally {
    await other.kill()
  }
})

check('pause and connect', async () => {
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await Sandbox.pause(sbx.sandboxId), false)
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal((await again.getInfo()).state, 'running')
  assert.equal((await again.commands.run('echo awake')).stdout, 'awake\n')
  // A resumed sandbox is the same E2B sandbox: sudo still works.
  assert.equal((await again.commands.run('sudo -n id -u')).stdout, '0\n')
})

check('kill during a stream', async () => {
  const h = await sbx.commands.run('sleep 60', { background: true })
  const ended = h.wait().then(() => 'exited', (e) => e)
  await sleep(500)
  await sbx.kill()
  const e = await ended
  assert.ok(e instanceof Error, `the stream ended with ${e}`)
  assert.match(e.message, /sandbox was killed/i)
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  // Its polled watcher went with it.
  assert.equal((await envd('filesystem.Filesystem/GetWatcherEvents', { watcherId })).status, 404)
})

let failed = false
for (const [name, fn] of checks) {
  try {
    await fn()
    console.log(`ok ${name}`)
  } catch (e) {
    console.log(`FAIL ${name}: ${e?.stack ?? e}`)
    failed = true
    break
  }
}
if (sbx) await sbx.kill().catch(() => {})
console.log(JSON.stringify({ timings }))
process.exit(failed ? 1 : 0)
