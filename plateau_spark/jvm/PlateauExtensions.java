package org.plateau.spark;

import java.lang.reflect.Field;
import java.lang.reflect.Method;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * spark.sql.extensions entry installed by plateau_core.spark.session().
 *
 * Spark keeps the read plan (partitions and read function) of a Python data source on the
 * provider object shared by every query of a loaded DataFrame, and filter pushdown
 * overwrites it. A later query of the same DataFrame without filters then reuses the
 * filtered plan, and every later query reuses the segment list of the first. This rule runs
 * before scan pushdown and drops that cached plan for plateau relations, so each query
 * plans its own read.
 */
public final class PlateauExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectOptimizerRule(
        new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
          @Override
          public Rule<LogicalPlan> apply(SparkSession session) {
            return new ForgetCachedReadPlan();
          }
        });
    return BoxedUnit.UNIT;
  }

  /** Clears the cached read plan of plateau relations that are not pushed down yet. */
  public static final class ForgetCachedReadPlan extends Rule<LogicalPlan> {
    static final String SOURCE = "plateau";

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      scala.collection.Iterator<LogicalPlan> leaves = plan.collectLeaves().iterator();
      while (leaves.hasNext()) {
        LogicalPlan leaf = leaves.next();
        // After pushdown the leaf is a DataSourceV2ScanRelation, whose plan must stay.
        if (leaf instanceof DataSourceV2Relation) {
          forget(((DataSourceV2Relation) leaf).table());
        }
      }
      return plan;
    }

    private static void forget(Table table) {
      if (!table.getClass().getName().endsWith(".PythonTable") || !SOURCE.equals(table.name())) {
        return;
      }
      try {
        Field field = table.getClass().getDeclaredField("ds");
        field.setAccessible(true);
        Object provider = field.get(table);
        Method reset = provider.getClass().getMethod("setReadInfo", readInfoClass(provider));
        reset.invoke(provider, new Object[] {null});
      } catch (ReflectiveOperationException e) {
        // Spark versions without the shared cache have nothing to clear.
      }
    }

    private static Class<?> readInfoClass(Object provider) throws ClassNotFoundException {
      String base = provider.getClass().getPackage().getName();
      return Class.forName(base + ".PythonDataSourceReadInfo", false, provider.getClass().getClassLoader());
    }
  }
}
