import Glibc

/// A raw `waitpid(2)` status, decoded in this one place: the low 7 bits are the signal that ended the child (0 when
/// it exited), the 8 bits above them its exit code.
///
/// Shifting the status right by 8 alone reads a child killed by a signal as "exited with status 0"; ``description``
/// says which happened.
public struct WaitStatus: Sendable, Equatable, CustomStringConvertible {
    /// The status as `waitpid` stored it.
    public let raw: Int32

    /// The status `waitpid` stored.
    public init(_ raw: Int32) { self.raw = raw }

    /// The signal that ended the child, nil when it exited.
    public var signal: Int32? { raw & 0x7f == 0 ? nil : raw & 0x7f }

    /// The child's exit code (0 when a signal ended it: check ``signal``).
    public var exitCode: Int32 { signal == nil ? (raw >> 8) & 0xff : 0 }

    /// "exited with status 3" or "was killed by signal 9 (Killed)".
    public var description: String {
        guard let signal else { return "exited with status \(exitCode)" }
        guard let name = strsignal(signal) else { return "was killed by signal \(signal)" }
        return "was killed by signal \(signal) (\(String(cString: name)))"
    }
}
