// One client of the JavaScript client's end-to-end test
// (jsclient_e2e_test.go), as a browser tab would run it: node
// --experimental-websocket tab_test.mjs CLIENT_MJS USER GROUP URL[,URL...]
// Prints one JSON line per state change and per delivered event; reads
// commands from stdin: "status S", "text T", "meta JSON", "invisible on|off",
// "members LIMIT" (every page of the group's members, LIMIT a page),
// "count", "sub USER" (one line per event of USER, with whether it says
// when USER was last seen), "close".
import {createInterface} from "node:readline";
import {pathToFileURL} from "node:url";

const [modPath, user, group, urls] = process.argv.slice(2);
const {RollcallClient, lastSeenOf} = await import(pathToFileURL(modPath).href);
const out = o => process.stdout.write(JSON.stringify(o) + "\n");
const c = new RollcallClient({
  urls: urls.split(","), user, device: "web", groups: [group],
  onstate: (state, info) => out({state, gateway: info.gateway || ""}),
});
c.subscribeGroup(group, ev => out({user: ev.user, status: ev.member ? ev.status : "offline", version: ev.version,
                                  invisible: !!ev.invisible}));
try {
  await c.connect();
} catch (e) {
  out({error: e.message});
  process.exit(1);
}
for await (const line of createInterface({input: process.stdin})) {
  const [cmd, arg] = line.split(" ");
  const rest = line.slice(cmd.length + 1);
  if (cmd === "status") {
    c.setStatus(arg).then(() => out({ok: "status"}), e => out({error: e.message}));
  } else if (cmd === "members") {
    c.groupMembers(group, {limit: Number(arg)}).then(
      g => out({members: g.members.map(m => m.user).join(","), online: g.online}), e => out({error: e.message}));
  } else if (cmd === "count") {
    c.groupCount(group).then(n => out({count: n}), e => out({error: e.message}));
  } else if (cmd === "text") {
    c.setStatusText(rest, "", new Date(Date.now() + 3600e3)).then(() => out({ok: "text"}), e => out({error: e.message}));
  } else if (cmd === "invisible") {
    c.setInvisible(arg === "on").then(() => out({ok: "invisible"}), e => out({error: e.message}));
  } else if (cmd === "meta") {
    c.setMeta(JSON.parse(rest)).then(() => out({ok: "meta"}), e => out({error: e.message}));
  } else if (cmd === "sub") {
    c.subscribe([arg], ev => out({sub: ev.user, online: ev.online, seen: lastSeenOf(ev) instanceof Date}));
  } else if (cmd === "close") {
    await c.close();
    out({closed: true});
    process.exit(0);
  }
}
