import Foundation
import Glibc
import TestOrigin

/// Where and with what a benchmark ran, recorded with every result.
struct MachineInfo: Codable, Sendable {
    var date: String
    var uname: String
    var cpuModel: String
    var cpuCount: Int
    var memoryGiB: Double
    var swiftVersion: String
    var buildConfiguration: String
    /// Tool name → first line of its version output ("missing" for absent peers).
    var versions: [String: String]
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages when the runs started (other load skews results).
    var loadAverageAtStart: String

    static func collect(nginx: String, clients: [Client], missing: [String]) -> MachineInfo {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        var versions: [String: String] = [:]
        versions["nginx"] = firstLine(of: nginx, ["-v"])
        for client in clients where client.kind.isPeer {
            versions[client.kind.rawValue] = firstLine(of: client.executable, ["--version"])
        }
        for name in missing { versions[name] = "missing" }
        versions["openssl"] = firstLine(of: "openssl", ["version"])
        #if DEBUG
            let build = "debug (numbers are meaningless: use swift run -c release)"
        #else
            let build = "release"
        #endif
        return MachineInfo(
            date: formatter.string(from: Date()),
            uname: firstLine(of: "uname", ["-a"]),
            cpuModel: cpuModel(),
            cpuCount: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))),
            memoryGiB: Double(sysconf(Int32(_SC_PHYS_PAGES))) * Double(sysconf(Int32(_SC_PAGESIZE))) / 1_073_741_824,
            swiftVersion: firstLine(of: "swift", ["--version"]),
            buildConfiguration: build,
            versions: versions,
            loadAverageAtStart: loadAverage())
    }

    /// The first three fields of /proc/loadavg.
    static func loadAverage() -> String {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return "unknown" }
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }

    private static func firstLine(of executable: String, _ arguments: [String]) -> String {
        guard let result = try? ProcessRunner.run(executable, arguments) else { return "unknown" }
        let line = result.output.split(whereSeparator: \.isNewline).first { !$0.isEmpty }
        return line.map { String($0).trimmingCharacters(in: .whitespaces) } ?? "unknown"
    }

    private static func cpuModel() -> String {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return "unknown"
    }
}
