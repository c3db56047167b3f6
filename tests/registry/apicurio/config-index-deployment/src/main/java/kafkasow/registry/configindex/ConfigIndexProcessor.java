package kafkasow.registry.configindex;

import apicurio.common.app.components.config.index.DynamicPropertiesInfoRecorder;
import io.apicurio.common.apps.config.DynamicConfigPropertyDef;
import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import io.quarkus.arc.deployment.SyntheticBeanBuildItem;
import io.quarkus.deployment.annotations.BuildStep;
import io.quarkus.deployment.annotations.ExecutionTime;
import io.quarkus.deployment.annotations.Record;
import io.quarkus.deployment.builditem.CombinedIndexBuildItem;
import java.util.ArrayList;
import java.util.List;
import javax.inject.Singleton;
import org.jboss.jandex.AnnotationInstance;
import org.jboss.jandex.AnnotationTarget;
import org.jboss.jandex.AnnotationValue;
import org.jboss.jandex.DotName;
import org.jboss.jandex.FieldInfo;
import org.jboss.jandex.Type;

/**
 * Finds every field annotated with both {@code @Dynamic} and {@code @ConfigProperty} and
 * registers the list of them as the {@link DynamicConfigPropertyList} bean.
 */
public class ConfigIndexProcessor {

  private static final DotName DYNAMIC = DotName.createSimple("io.apicurio.common.apps.config.Dynamic");
  private static final DotName CONFIG_PROPERTY =
      DotName.createSimple("org.eclipse.microprofile.config.inject.ConfigProperty");

  @BuildStep
  @Record(ExecutionTime.STATIC_INIT)
  SyntheticBeanBuildItem dynamicProperties(
      CombinedIndexBuildItem index, DynamicPropertiesInfoRecorder recorder) throws Exception {
    List<DynamicConfigPropertyDef> defs = new ArrayList<>();
    for (AnnotationInstance dynamic : index.getIndex().getAnnotations(DYNAMIC)) {
      if (dynamic.target().kind() != AnnotationTarget.Kind.FIELD) {
        continue;
      }
      FieldInfo field = dynamic.target().asField();
      AnnotationInstance config = field.annotation(CONFIG_PROPERTY);
      if (config == null) {
        continue;
      }
      AnnotationValue defaultValue = config.value("defaultValue");
      DynamicConfigPropertyDef def =
          new DynamicConfigPropertyDef(
              config.value("name").asString(),
              valueClass(field.type()),
              defaultValue == null ? null : defaultValue.asString());
      def.setLabel(stringOrNull(dynamic.value("label")));
      def.setDescription(stringOrNull(dynamic.value("description")));
      AnnotationValue requires = dynamic.value("requires");
      def.setRequires(requires == null ? new String[0] : requires.asStringArray());
      defs.add(def);
    }
    return SyntheticBeanBuildItem.configure(DynamicConfigPropertyList.class)
        .scope(Singleton.class)
        .unremovable()
        .runtimeValue(recorder.initializePropertiesInfo(defs))
        .done();
  }

  /** The type a property holds: T for Supplier&lt;T&gt; (and other wrappers), else the field's type. */
  private static Class<?> valueClass(Type type) throws ClassNotFoundException {
    Type value = type;
    if (type.kind() == Type.Kind.PARAMETERIZED_TYPE
        && !type.asParameterizedType().arguments().isEmpty()) {
      value = type.asParameterizedType().arguments().get(0);
    }
    if (value.kind() == Type.Kind.PRIMITIVE) {
      return switch (value.asPrimitiveType().primitive()) {
        case BOOLEAN -> Boolean.class;
        case INT -> Integer.class;
        case LONG -> Long.class;
        default -> String.class;
      };
    }
    return Class.forName(
        value.name().toString(), false, Thread.currentThread().getContextClassLoader());
  }

  private static String stringOrNull(AnnotationValue value) {
    return value == null ? null : value.asString();
  }
}
