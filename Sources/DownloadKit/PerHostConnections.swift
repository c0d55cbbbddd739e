/// The one rule for how many connections a client opens to one host (origin).
///
/// A cap per host is a politeness default (``politeDefault``, 8, like browsers' 6–8), never a silent
/// override of what the caller asked for: when the caller asks for `maxConcurrent` files at once with
/// `connectionsPerFile` connections each, the cap is raised to cover them unless the caller also set a
/// cap explicitly — then transfers beyond it wait for a free connection to that host, and
/// ``waitsForConnections(maxConcurrent:connectionsPerFile:cap:)`` tells the caller to say so. A file's
/// segments count against its host's cap like separate files do.
public enum PerHostConnections {
    /// Connections to one host when nobody asked for more.
    public static let politeDefault = 8

    /// The cap to configure `DKHTTPClientConfiguration.maxConnectionsPerOrigin` with.
    /// - Parameters:
    ///   - maxConcurrent: Files transferred at once.
    ///   - connectionsPerFile: Connections per file (segmented downloads).
    ///   - explicit: A cap the caller set; used as given (at least 1).
    public static func cap(maxConcurrent: Int, connectionsPerFile: Int, explicit: Int?) -> Int {
        if let explicit { return max(1, explicit) }
        return max(politeDefault, max(1, maxConcurrent) * max(1, connectionsPerFile))
    }

    /// Whether transfers to one host can be held back by `cap` (so a user should be told).
    public static func waitsForConnections(maxConcurrent: Int, connectionsPerFile: Int, cap: Int) -> Bool {
        max(1, maxConcurrent) * max(1, connectionsPerFile) > cap
    }
}
