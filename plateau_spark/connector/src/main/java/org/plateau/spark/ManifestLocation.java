package org.plateau.spark;

import java.io.Serializable;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import org.sqlite.SQLiteConfig;

/**
 * Where the manifest is: an SQLite file, or a PostgreSQL database reached over TCP. Made from
 * the SQLAlchemy URL plateau's config holds (storage.manifest_url), so one setting serves both.
 */
final class ManifestLocation implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final int BUSY_TIMEOUT_MS = 30_000;

  final String sqliteFile; // null for PostgreSQL
  private final String jdbcUrl; // null for SQLite
  private final String user;
  private final String password;

  private ManifestLocation(String sqliteFile, String jdbcUrl, String user, String password) {
    this.sqliteFile = sqliteFile;
    this.jdbcUrl = jdbcUrl;
    this.user = user;
    this.password = password;
  }

  static ManifestLocation sqlite(String file) {
    return new ManifestLocation(file, null, null, null);
  }

  /** sqlite:///relative, sqlite:////absolute, or postgresql[+driver]://user:password@host:port/db. */
  static ManifestLocation parse(String url) {
    if (url.startsWith("sqlite:///") && url.length() > "sqlite:///".length()) {
      String file = url.substring("sqlite:///".length());
      int query = file.indexOf('?');
      return sqlite(query < 0 ? file : file.substring(0, query));
    }
    if (url.startsWith("postgresql:") || url.startsWith("postgresql+")) {
      return postgresql(url);
    }
    throw new IllegalArgumentException(
        "the plateau connector reads SQLite (sqlite:///<file>) and PostgreSQL"
            + " (postgresql://user@host:port/db) manifests; got '" + hidden(url) + "'");
  }

  private static ManifestLocation postgresql(String url) {
    URI uri;
    try {
      uri = new URI(url);
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException("not a manifest URL: '" + hidden(url) + "'");
    }
    String query = uri.getRawQuery() == null ? "" : uri.getRawQuery();
    if (uri.getHost() == null || query.contains("host=")) {
      throw new IllegalArgumentException(
          "the plateau connector reaches a PostgreSQL manifest over TCP (host and port in the"
              + " URL), not a Unix socket; got '" + hidden(url) + "'");
    }
    String database = uri.getPath() == null ? "" : uri.getPath().replaceFirst("^/", "");
    if (database.isEmpty()) {
      throw new IllegalArgumentException("the manifest URL names no database: '" + hidden(url) + "'");
    }
    String user = null;
    String password = null;
    if (uri.getRawUserInfo() != null) {
      String[] parts = uri.getRawUserInfo().split(":", 2);
      user = decode(parts[0]);
      password = parts.length > 1 ? decode(parts[1]) : null;
    }
    String jdbc =
        "jdbc:postgresql://" + uri.getHost() + (uri.getPort() < 0 ? "" : ":" + uri.getPort()) + "/" + database
            + jdbcParameters(query, url);
    return new ManifestLocation(null, jdbc, user, password);
  }

  /**
   * The URL's libpq parameters as the JDBC driver names them. Dropped, `sslmode=verify-full`
   * would have read the manifest without checking the server's certificate (the driver's
   * default is `prefer`); a parameter with no JDBC counterpart is refused, not ignored.
   */
  private static String jdbcParameters(String query, String url) {
    StringBuilder out = new StringBuilder();
    for (String pair : query.split("&")) {
      if (pair.isEmpty()) {
        continue;
      }
      String[] kv = pair.split("=", 2);
      String name = decode(kv[0]);
      String jdbcName = JDBC_PARAMETERS.get(name);
      if (jdbcName == null) {
        throw new IllegalArgumentException(
            "the plateau connector cannot pass the manifest URL's parameter '" + name + "' to"
                + " PostgreSQL's JDBC driver (it takes " + String.join(", ", JDBC_PARAMETERS.keySet())
                + "); got '" + hidden(url) + "'");
      }
      String value = kv.length > 1 ? decode(kv[1]) : "";
      out.append(out.length() == 0 ? '?' : '&')
          .append(jdbcName)
          .append('=')
          .append(URLEncoder.encode(value, StandardCharsets.UTF_8));
    }
    return out.toString();
  }

  private static final Map<String, String> JDBC_PARAMETERS = jdbcParameterNames();

  private static Map<String, String> jdbcParameterNames() {
    Map<String, String> names = new LinkedHashMap<>();
    for (String same : new String[] {"sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "options"}) {
      names.put(same, same);
    }
    names.put("connect_timeout", "connectTimeout");
    names.put("application_name", "ApplicationName");
    return Collections.unmodifiableMap(names);
  }

  /**
   * A read-only connection. SQLite: the manifest is in WAL mode (the writer sets it), so a
   * reader never blocks the writer. PostgreSQL: autocommit reads, each its own snapshot.
   */
  Connection connect() throws SQLException {
    if (sqliteFile != null) {
      SQLiteConfig config = new SQLiteConfig();
      config.setReadOnly(true);
      config.setBusyTimeout(BUSY_TIMEOUT_MS);
      return config.createConnection("jdbc:sqlite:" + sqliteFile);
    }
    Properties properties = new Properties();
    if (user != null) {
      properties.setProperty("user", user);
    }
    if (password != null) {
      properties.setProperty("password", password);
    }
    properties.setProperty("readOnly", "true");
    properties.setProperty("ApplicationName", "plateau-spark");
    // The driver itself, not DriverManager: Spark loads this jar in a class loader of its own,
    // which DriverManager does not search.
    Connection connection = new org.postgresql.Driver().connect(jdbcUrl, properties);
    connection.setReadOnly(true);
    return connection;
  }

  @Override
  public String toString() {
    return sqliteFile != null ? sqliteFile : jdbcUrl + (user == null ? "" : " as " + user);
  }

  /**
   * Percent-escapes decoded as SQLAlchemy decodes them: a `+` stays a plus sign (URLDecoder,
   * made for form data, would turn it into a space, and a user or password holding one would
   * not log in).
   */
  private static String decode(String raw) {
    return URLDecoder.decode(raw.replace("+", "%2B"), StandardCharsets.UTF_8);
  }

  private static String hidden(String url) {
    return url.replaceAll("//[^@/]*@", "//***@");
  }
}
