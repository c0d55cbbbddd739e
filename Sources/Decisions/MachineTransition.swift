/// A (state, reason) transition the download machine publishes, as a value of the module: the library maps
/// each to its own transition type (and so to the public state and reason pair) in one place.
package enum MachineTransition<Failure: MachineError>: Sendable, Hashable {
    /// A fresh request from byte 0.
    case start
    /// A request continuing partial data.
    case resume(offset: Int64)
    /// Partial data discarded.
    case restart(RestartReason)
    /// A redirect followed (the target as listed: no userinfo, no query value).
    case redirect(to: String)
    /// A fresh URL from the URL provider (as listed).
    case refreshURL(to: String)
    /// A segmented download stays on one connection, for this reason.
    case stayOnOneConnection(String)
    /// The server cannot resume this resource.
    case notResumable
    /// Body bytes flow on one connection.
    case receive(resumedFrom: Int64)
    /// Waiting before a retry of this failure.
    case retry(after: Duration, attempt: Int, error: Failure)
}
