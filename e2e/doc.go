// Package e2e holds the container drills: tests that start the compose
// cluster of deploy/docker-compose.yml (three gateways from the image,
// client tokens, encrypted gossip), connect clients to every gateway over
// the real client protocol, and hurt the cluster from outside with Docker:
// docker kill, docker network disconnect, a rolling restart. They check
// what clients and the HTTP API see against the promises in README.md
// ("What Rollcall promises under faults"), with the bounds derived as
// chaos.DeriveBounds derives them.
//
// The tests need Docker, the image and the secrets (make image secrets);
// they run only with ROLLCALL_E2E=1, which `make e2e` sets, and skip
// otherwise. The package has no code of its own beyond its tests.
package e2e
