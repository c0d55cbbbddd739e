import DownloadKitCLI

// `downloadkit-fleet`: the commands of `downloadkit` with the PostgreSQL queue (`queue --store postgres://…`,
// docs/FLEET.md). A separate executable so that the `downloadkit` people install carries one TLS stack
// (OpenSSL); this one also links postgres-nio and the BoringSSL it brings (docs/PACKAGES.md).
FleetQueues.install(QueueFleet())
await DownloadKitCommand.main(named: "downloadkit-fleet")
