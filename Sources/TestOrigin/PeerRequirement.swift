import Foundation

/// Whether a test that needs a peer program (nginx, the openssl CLI…) should run: when the program is installed,
/// and always when `CI=true`. `Scripts/install-deps.sh` installs every peer before CI's run, so a peer missing
/// there is a broken set-up, and the test runs and fails naming what it could not start — a `.enabled(if:)`
/// that disabled it would let the run pass with the conformance suites silently off. On a developer's machine
/// without the peer the suite is skipped with the reason it gives.
///
/// ```swift
/// @Suite(.enabled(if: peerRequired(NginxServer.locate() != nil), "nginx not installed: run Scripts/install-deps.sh"))
/// ```
public func peerRequired(_ installed: Bool, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
    installed || environment["CI"] == "true"
}
