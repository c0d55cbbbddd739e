// DownloadKitCLI names its packages (ArgumentParser, Hummingbird, SwiftNIO) only under the package trait `Tools` (so that
// a program using the libraries never resolves them; docs/PACKAGES.md). Without it, say so first.
#if !Tools
#error("DownloadKitCLI is part of the tools: build with --traits Tools (README), or .package(path: …, traits: [\"Tools\"])")
#endif
