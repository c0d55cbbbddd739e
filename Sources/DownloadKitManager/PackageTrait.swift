// DownloadKitManager names GRDB only under the package trait `Manager` (so that a program using DownloadKit
// alone never resolves GRDB; docs/PACKAGES.md). Without it, say so before the missing module does.
#if !Manager
#error("DownloadKitManager needs the package trait Manager: a package that uses it names it, .package(url: …, from: …, traits: [\"Manager\"]); in this repository build with --traits Tools (README)")
#endif
